// SubagentdClient: spawns subagentd, speaks NDJSON JSON-RPC 2.0 over its stdin/stdout.

import { spawn, type ChildProcess } from "node:child_process";
import { EventEmitter } from "node:events";
import type { Readable, Writable } from "node:stream";
import { isDeepStrictEqual } from "node:util";

import type {
  AgentInfo,
  BudgetParams,
  BudgetResult,
  CallToolResult,
  DiscoverResult,
  Empty,
  FollowupParams,
  InitializeParams,
  InitializeResult,
  InterruptAgentParams,
  InterruptAgentResult,
  InterruptResult,
  ListAgentsParams,
  ListAgentsResult,
  ListParams,
  ListResult,
  MessageIdResult,
  MessageInfo,
  Methods,
  MethodName,
  OpenParams,
  OpenResult,
  Params,
  ReportParams,
  ReportResult,
  ResourcesListParams,
  ResourcesListResult,
  ResourcesReadResult,
  ResourceTemplatesListResult,
  ResourceUriParams,
  Task,
  TaskIdParams,
  TasksListParams,
  TasksListResult,
  SendMessageParams,
  SendMessageResult,
  SeqResult,
  ServerNotifications,
  SpawnAgentParams,
  SpawnAgentResult,
  SpawnParams,
  SpawnResult,
  StatsResult,
  ClockAdvanceParams,
  ClockAdvanceResult,
  StopParams,
  StopResult,
  ToolsCallParams,
  ToolsListParams,
  ToolsListResult,
  TranscriptAppendParams,
  TranscriptReadParams,
  TranscriptReadResult,
  TurnBeginParams,
  TurnBeginResult,
  TurnEndParams,
  WaitAgentsParams,
  AskParentParams,
  AskParentResult,
  AskUserParams,
  AskUserResult,
  QuestionAnswerParams,
  WaitAgentsResult,
  WaitIdleParams,
  WaitIdleResult,
  HostNotifications,
} from "./types.js";

export const CLIENT_NAME = "@subagentd/client";
export const CLIENT_VERSION = "0.1.0";
/** The MCP handshake-era protocol version `initialize` proposes unless told otherwise. */
export const DEFAULT_MCP_PROTOCOL_VERSION = "2025-06-18";

/** A JSON-RPC error response from subagentd. `code` is one of `ErrorCode`'s values. */
export class RpcError extends Error {
  readonly code: number;
  readonly data: unknown;
  /** The method of the request that failed (when known). */
  readonly method: string | undefined;

  constructor(error: { code: number; message: string; data?: unknown }, method?: string) {
    super(error.message);
    this.name = "RpcError";
    this.code = error.code;
    this.data = error.data;
    this.method = method;
  }
}

/** A request got no response within its timeout. A cancellation was sent to the server. */
export class RpcTimeoutError extends Error {
  readonly method: string;
  readonly id: number;
  constructor(method: string, id: number, timeoutMs: number) {
    super(`${method} (id ${id}) got no response within ${timeoutMs} ms`);
    this.name = "RpcTimeoutError";
    this.method = method;
    this.id = id;
  }
}

/** The server went away (exited or closed stdout) before it answered. */
export class ConnectionClosedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConnectionClosedError";
  }
}

/**
 * The spawned subagentd could not start (a database it cannot use, a `--caller` root another
 * process serves, a missing extra): the message is its own `cannot start: …` line.
 */
export class CannotStartError extends ConnectionClosedError {
  constructor(line: string) {
    super(line);
    this.name = "CannotStartError";
  }
}

const CANNOT_START = "cannot start: ";

/** subagentd's own `cannot start: …` line in what it logged (text or JSON logs), the last one. */
export function cannotStartLine(logged: string): string | undefined {
  for (const line of logged.split("\n").reverse()) {
    const at = line.indexOf(CANNOT_START);
    if (at < 0) continue;
    if (line.startsWith("{")) {
      try {
        const message = JSON.parse(line).message;
        if (typeof message === "string" && message.startsWith(CANNOT_START)) return message;
      } catch {
        // not a JSON log line after all
      }
    }
    return line.slice(at).trimEnd();
  }
  return undefined;
}

export interface SubagentdClientOptions {
  /** Executable to run. Default `subagentd`. */
  command?: string;
  /** Arguments before the ones derived from `db` / `caller`. Default `[]`. */
  args?: string[];
  /** Convenience: adds `--db <db>` (use `":memory:"` for throwaway runs). */
  db?: string;
  /** Convenience: adds `--caller <id>` (default caller for `tools/call`). */
  caller?: string;
  cwd?: string;
  /** Environment of the child. Default: this process's environment. */
  env?: NodeJS.ProcessEnv;
  /** Default timeout of every request, in milliseconds (0 = none). Default 30 000. */
  requestTimeoutMs?: number;
  /**
   * What to do with the server's stderr (its logs): `"pipe"` (default) keeps the last 64 KiB in
   * `client.stderrText` and emits `"stderr"` events; `"inherit"` shares ours; `"ignore"` drops it.
   */
  stderr?: "pipe" | "inherit" | "ignore";
}

export interface RequestOptions {
  /** Overrides the client's default timeout for this request (0 = none). */
  timeoutMs?: number;
  /** Aborting sends `notifications/cancelled` and rejects with the signal's reason. */
  signal?: AbortSignal;
}

interface Pending {
  method: string;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
  timer?: NodeJS.Timeout;
  cleanup?: () => void;
}

type Listener<T> = (params: T) => void;

export interface SubagentdClientEvents {
  /** Every notification: its method and params (also emitted under the method's own name). */
  notification: (method: string, params: unknown) => void;
  /** Every parsed frame from the server, before dispatch (responses, notifications, batches). */
  frame: (frame: unknown) => void;
  /** A line on stdout that is not JSON, or a frame that is not JSON-RPC. */
  protocolError: (error: Error, line: string) => void;
  /** A chunk of the server's stderr (only with `stderr: "pipe"`). */
  stderr: (text: string) => void;
  /** The server process exited. */
  exit: (code: number | null, signal: NodeJS.Signals | null) => void;
}

const STDERR_KEEP = 64 * 1024;
/** How long a server that closed its stdout or exited is given to finish its stderr (its reason). */
const EXIT_WAIT_MS = 2_000;
/** Notifications kept for `waitFor` (the oldest go first past this many). */
export const KEEP_NOTIFICATIONS = 10_000;

interface Received {
  method: string;
  params: unknown;
  taken: boolean;
}

interface Waiter {
  method: string;
  test: (params: unknown) => boolean;
  take: (params: unknown) => void;
}

/**
 * A connection to one subagentd process.
 *
 * Notifications from the server are emitted as events under their method names
 * (`client.on("turn/start", params => ...)`) and as a generic `"notification"` event.
 */
export class SubagentdClient extends EventEmitter {
  readonly process: ChildProcess | undefined;
  /** The tail of the server's stderr (with `stderr: "pipe"`). */
  stderrText = "";
  readonly requestTimeoutMs: number;

  private readonly input: Writable;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private buffer = "";
  private closed = false;
  private markShut!: () => void;
  /** Resolved once the connection is closed (every pending request rejected, `isClosed`). */
  private readonly shut = new Promise<void>((resolve) => (this.markShut = resolve));
  private closedReason = "";
  private cannotStart = false; // closedReason is the server's own `cannot start: …` line
  private stderrPiped = false;
  private endReason: string | undefined; // stdout's end or the exit, whichever came first
  private endTimer: NodeJS.Timeout | undefined;
  private readonly exited: Promise<number | null>;
  private readonly received: Received[] = [];
  private waiters: Waiter[] = [];

  /** Typed wrappers for `agents/*`. */
  readonly agents: {
    open(params?: OpenParams, options?: RequestOptions): Promise<OpenResult>;
    close(params: { agent_id: string } & Params, options?: RequestOptions): Promise<Empty>;
    get(params: { agent_id: string } & Params, options?: RequestOptions): Promise<AgentInfo>;
    spawn(params: SpawnParams, options?: RequestOptions): Promise<SpawnResult>;
    followup(params: FollowupParams, options?: RequestOptions): Promise<MessageIdResult>;
    interrupt(params: { agent_id: string } & Params, options?: RequestOptions): Promise<InterruptResult>;
    list(params: ListParams, options?: RequestOptions): Promise<ListResult>;
    /** Set (or, with `remove`, drop) limits of an agent's own budget; held input then runs. */
    budget(params: BudgetParams, options?: RequestOptions): Promise<BudgetResult>;
    /** Stop a whole subtree: every open turn interrupted, queues parked or cleared, nothing starts. */
    stop(params: StopParams, options?: RequestOptions): Promise<StopResult>;
    /** Resume a stopped subtree: its held input runs again. */
    resume(params: { agent_id: string } & Params, options?: RequestOptions): Promise<BudgetResult>;
    /**
     * Answered once no agent of the tree runs a turn or has input to run, or after
     * `timeout_ms` (default 30000; then `idle` is false and `running` / `runnable` name the busy
     * ones). The request's own timeout defaults to `timeout_ms` plus the client's.
     */
    waitIdle(params: WaitIdleParams, options?: RequestOptions): Promise<WaitIdleResult>;
  };
  /** Typed wrappers for `turns/*`. */
  readonly turns: {
    begin(params: TurnBeginParams, options?: RequestOptions): Promise<TurnBeginResult>;
    end(params: TurnEndParams, options?: RequestOptions): Promise<Empty>;
  };
  /** Typed wrappers for `transcript/*`. */
  readonly transcript: {
    append(params: TranscriptAppendParams, options?: RequestOptions): Promise<SeqResult>;
    read(params: TranscriptReadParams, options?: RequestOptions): Promise<TranscriptReadResult>;
  };
  /** Typed wrappers for `messages/get` and `messages/cancel`. */
  readonly messages: {
    get(params: { message_id: string } & Params, options?: RequestOptions): Promise<MessageInfo>;
    cancel(params: { message_id: string } & Params, options?: RequestOptions): Promise<MessageInfo>;
  };
  /** Typed wrappers for `server/discover` and `server/stats`. */
  readonly server: {
    discover(params?: Params, options?: RequestOptions): Promise<DiscoverResult>;
    stats(params?: Params, options?: RequestOptions): Promise<StatsResult>;
  };
  /** `clock/advance`: a `--clock manual` subagentd's clock moves on (tests); its timers due run. */
  readonly clock: {
    advance(params: ClockAdvanceParams, options?: RequestOptions): Promise<ClockAdvanceResult>;
  };
  /** `question/answer`: the person's answer to a `question/ask` (a subagent's ask_user). */
  readonly question: {
    answer(params: QuestionAnswerParams, options?: RequestOptions): Promise<Empty>;
  };
  /** Typed wrappers for the MCP-style bridge `tools/list` and `tools/call`. */
  readonly tools: {
    list(params?: ToolsListParams, options?: RequestOptions): Promise<ToolsListResult>;
    call(params: ToolsCallParams, options?: RequestOptions): Promise<CallToolResult>;
  };
  /** MCP resources: the caller's subtree, each agent's state and transcript (PROTOCOL.md §5). */
  readonly resources: {
    list(params?: ResourcesListParams, options?: RequestOptions): Promise<ResourcesListResult>;
    templates: {
      list(params?: ResourcesListParams, options?: RequestOptions): Promise<ResourceTemplatesListResult>;
    };
    read(params: ResourceUriParams, options?: RequestOptions): Promise<ResourcesReadResult>;
    subscribe(params: ResourceUriParams, options?: RequestOptions): Promise<Empty>;
    unsubscribe(params: ResourceUriParams, options?: RequestOptions): Promise<Empty>;
  };
  /**
   * MCP tasks (2025-11-25; PROTOCOL.md §5): a `tools.call` with `task` answers a task at once;
   * `result` waits until the task is terminal.
   */
  readonly tasks: {
    get(params: TaskIdParams, options?: RequestOptions): Promise<Task>;
    result(params: TaskIdParams, options?: RequestOptions): Promise<CallToolResult>;
    list(params?: TasksListParams, options?: RequestOptions): Promise<TasksListResult>;
    cancel(params: TaskIdParams, options?: RequestOptions): Promise<Task>;
  };

  /** Spawn subagentd (`options.command`, default `subagentd`) and connect to its pipes. */
  constructor(options: SubagentdClientOptions = {}) {
    super();
    this.requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
    const args = [...(options.args ?? [])];
    if (options.db !== undefined) args.push("--db", options.db);
    if (options.caller !== undefined) args.push("--caller", options.caller);
    const stderrMode = options.stderr ?? "pipe";
    const child = spawn(options.command ?? "subagentd", args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ["pipe", "pipe", stderrMode],
    });
    this.process = child;
    this.input = child.stdin!;
    this.input.on("error", () => {
      // EPIPE after the server exited: the exit handler rejects what is pending.
    });
    this.attachOutput(child.stdout!);
    if (stderrMode === "pipe") {
      this.stderrPiped = true;
      child.stderr!.setEncoding("utf8");
      child.stderr!.on("data", (chunk: string) => {
        this.stderrText = (this.stderrText + chunk).slice(-STDERR_KEEP);
        if (this.listenerCount("stderr") > 0) this.emit("stderr", chunk);
      });
    }
    this.exited = new Promise((resolve) => {
      child.on("error", (error) => {
        this.shutdown(`could not run subagentd: ${error.message}`);
        resolve(null);
      });
      child.on("exit", (code, signal) => {
        this.ended(`subagentd exited (code ${code}, signal ${signal})`);
        this.emit("exit", code, signal);
        resolve(code);
      });
      // its stdio closed too: what it logged is all read, a `cannot start: …` line included
      child.on("close", () => this.finish());
    });

    const call = <M extends MethodName>(method: M) =>
      (params: Methods[M]["params"], options?: RequestOptions): Promise<Methods[M]["result"]> =>
        this.request(method, params, options);
    this.agents = {
      open: (params = {}, options) => this.request("agents/open", params, options),
      close: call("agents/close"),
      get: call("agents/get"),
      spawn: call("agents/spawn"),
      followup: call("agents/followup"),
      interrupt: call("agents/interrupt"),
      list: call("agents/list"),
      budget: call("agents/budget"),
      stop: call("agents/stop"),
      resume: call("agents/resume"),
      waitIdle: (params, options) =>
        this.request("agents/wait_idle", params, this.waitOptions(params.timeout_ms, options)),
    };
    this.turns = { begin: call("turns/begin"), end: call("turns/end") };
    this.transcript = { append: call("transcript/append"), read: call("transcript/read") };
    this.messages = { get: call("messages/get"), cancel: call("messages/cancel") };
    this.server = {
      discover: (params = {}, options) => this.request("server/discover", params, options),
      stats: (params = {}, options) => this.request("server/stats", params, options),
    };
    this.clock = {
      advance: (params, options) => this.request("clock/advance", params, options),
    };
    this.question = { answer: call("question/answer") };
    this.tools = {
      list: (params = {}, options) => this.request("tools/list", params, options),
      call: call("tools/call"),
    };
    this.resources = {
      list: (params = {}, options) => this.request("resources/list", params, options),
      templates: {
        list: (params = {}, options) => this.request("resources/templates/list", params, options),
      },
      read: call("resources/read"),
      subscribe: call("resources/subscribe"),
      unsubscribe: call("resources/unsubscribe"),
    };
    this.tasks = {
      get: call("tasks/get"),
      result: call("tasks/result"),
      list: (params = {}, options) => this.request("tasks/list", params, options),
      cancel: call("tasks/cancel"),
    };
  }

  // --- typed events ---------------------------------------------------------------------------

  override on<K extends keyof ServerNotifications>(event: K, listener: Listener<ServerNotifications[K]>): this;
  override on<K extends keyof SubagentdClientEvents>(event: K, listener: SubagentdClientEvents[K]): this;
  override on(event: string | symbol, listener: (...args: any[]) => void): this;
  override on(event: string | symbol, listener: (...args: any[]) => void): this {
    return super.on(event, listener);
  }

  override once<K extends keyof ServerNotifications>(event: K, listener: Listener<ServerNotifications[K]>): this;
  override once<K extends keyof SubagentdClientEvents>(event: K, listener: SubagentdClientEvents[K]): this;
  override once(event: string | symbol, listener: (...args: any[]) => void): this;
  override once(event: string | symbol, listener: (...args: any[]) => void): this {
    return super.once(event, listener);
  }

  override off<K extends keyof ServerNotifications>(event: K, listener: Listener<ServerNotifications[K]>): this;
  override off<K extends keyof SubagentdClientEvents>(event: K, listener: SubagentdClientEvents[K]): this;
  override off(event: string | symbol, listener: (...args: any[]) => void): this;
  override off(event: string | symbol, listener: (...args: any[]) => void): this {
    return super.off(event, listener);
  }

  /**
   * The earliest notification `method` whose params satisfy `match` (a predicate, or fields that
   * must be equal) that no earlier `waitFor` returned — one received before the call included
   * (the client keeps the last 10 000 notifications, whoever else listened to them) — else the
   * first such to arrive. Rejects after `timeoutMs`, naming what of `method` did arrive.
   */
  waitFor<K extends keyof ServerNotifications>(
    method: K,
    match: Partial<ServerNotifications[K]> | ((params: ServerNotifications[K]) => boolean) = {},
    timeoutMs = this.requestTimeoutMs || 30_000,
  ): Promise<ServerNotifications[K]> {
    const test = (params: unknown): boolean =>
      typeof match === "function"
        ? match(params as ServerNotifications[K])
        : Object.entries(match).every(([k, v]) => isDeepStrictEqual((params as Record<string, unknown>)?.[k], v));
    const kept = this.received.find((r) => !r.taken && r.method === method && test(r.params));
    if (kept) {
      kept.taken = true;
      return Promise.resolve(kept.params as ServerNotifications[K]);
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        method,
        test,
        take: (params) => {
          clearTimeout(timer);
          resolve(params as ServerNotifications[K]);
        },
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new Error(this.missing(method, match, timeoutMs)));
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  /** The params of every notification kept (of `method`), in arrival order. */
  notifications(method?: string): unknown[] {
    return this.received.filter((r) => method === undefined || r.method === method).map((r) => r.params);
  }

  private missing(method: string, match: unknown, timeoutMs: number): string {
    const shown = typeof match === "function" ? "the predicate" : JSON.stringify(match);
    const said = `no ${method} notification matching ${shown} within ${timeoutMs} ms`;
    const seen = this.received.filter((r) => r.method === method).slice(-10);
    if (seen.length === 0) return `${said}; no ${method} notification arrived at all`;
    const lines = seen.map((r) => `  ${JSON.stringify(r.params)}${r.taken ? " (taken)" : ""}`);
    return `${said}; the ${method} notifications received:\n${lines.join("\n")}`;
  }

  /** A notification arrived: kept, handed to the first waiter it matches, then emitted. */
  private keep(method: string, params: unknown): void {
    const entry: Received = { method, params, taken: false };
    this.received.push(entry);
    if (this.received.length > KEEP_NOTIFICATIONS) this.received.shift();
    const waiter = this.waiters.find((w) => w.method === method && w.test(params));
    if (waiter) {
      entry.taken = true;
      this.waiters = this.waiters.filter((w) => w !== waiter);
      waiter.take(params);
    }
  }

  // --- requests ---------------------------------------------------------------------------------

  /** Send a request and wait for its result; rejects with `RpcError` on an error response. */
  request<M extends MethodName>(method: M, params: Methods[M]["params"], options?: RequestOptions): Promise<Methods[M]["result"]>;
  request(method: string, params?: unknown, options?: RequestOptions): Promise<unknown>;
  request(method: string, params?: unknown, options: RequestOptions = {}): Promise<unknown> {
    if (this.closed) return Promise.reject(this.closedError());
    const signal = options.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const id = this.nextId++;
    const timeoutMs = options.timeoutMs ?? this.requestTimeoutMs;
    return new Promise((resolve, reject) => {
      const entry: Pending = { method, resolve, reject };
      this.pending.set(id, entry);
      if (timeoutMs > 0) {
        entry.timer = setTimeout(() => {
          this.abandon(id, "timeout");
          reject(new RpcTimeoutError(method, id, timeoutMs));
        }, timeoutMs);
      }
      if (signal) {
        const onAbort = () => {
          this.abandon(id, "aborted");
          reject(signal.reason);
        };
        signal.addEventListener("abort", onAbort, { once: true });
        entry.cleanup = () => signal.removeEventListener("abort", onAbort);
      }
      const frame: Record<string, unknown> = { jsonrpc: "2.0", id, method };
      if (params !== undefined) frame.params = params;
      this.sendFrame(frame);
    });
  }

  /** Send a notification (never answered). */
  notify<K extends keyof HostNotifications>(method: K, params: HostNotifications[K]): void;
  notify(method: string, params?: unknown): void;
  notify(method: string, params?: unknown): void {
    const frame: Record<string, unknown> = { jsonrpc: "2.0", method };
    if (params !== undefined) frame.params = params;
    this.sendFrame(frame);
  }

  /** Write one JSON value as a frame, verbatim (for tests and custom traffic). */
  sendFrame(frame: unknown): void {
    this.sendRaw(JSON.stringify(frame));
  }

  /** Write `text` plus a newline to the server's stdin, verbatim. */
  sendRaw(text: string): void {
    if (this.closed || this.input.destroyed || this.input.writableEnded) {
      throw this.closed ? this.closedError() : new ConnectionClosedError("stdin is closed");
    }
    this.input.write(text + "\n");
  }

  private abandon(id: number, reason: string): void {
    const entry = this.pending.get(id);
    if (!entry) return;
    this.settle(id);
    if (!this.closed && !this.input.writableEnded) {
      try {
        this.notify("notifications/cancelled", { requestId: id, reason });
      } catch {
        // the connection is going away anyway
      }
    }
  }

  private settle(id: number): Pending | undefined {
    const entry = this.pending.get(id);
    if (!entry) return undefined;
    this.pending.delete(id);
    if (entry.timer) clearTimeout(entry.timer);
    entry.cleanup?.();
    return entry;
  }

  // --- incoming ---------------------------------------------------------------------------------

  private attachOutput(output: Readable): void {
    output.setEncoding("utf8");
    output.on("data", (chunk: string) => {
      this.buffer += chunk;
      let newline: number;
      while ((newline = this.buffer.indexOf("\n")) >= 0) {
        let line = this.buffer.slice(0, newline);
        this.buffer = this.buffer.slice(newline + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line.trim() === "") continue;
        this.onLine(line);
      }
    });
    output.on("end", () => this.ended("subagentd closed its stdout"));
  }

  private onLine(line: string): void {
    let frame: unknown;
    try {
      frame = JSON.parse(line);
    } catch (error) {
      this.emit("protocolError", error as Error, line);
      return;
    }
    this.emit("frame", frame);
    for (const message of Array.isArray(frame) ? frame : [frame]) this.dispatch(message, line);
  }

  private dispatch(message: unknown, line: string): void {
    if (typeof message !== "object" || message === null) {
      this.emit("protocolError", new Error("frame is not a JSON-RPC message"), line);
      return;
    }
    const m = message as Record<string, unknown>;
    if (typeof m.method === "string") {
      if ("id" in m && m.id !== undefined) {
        // subagentd sends no requests; answer any politely so a peer never hangs.
        this.sendFrame({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "method not found" } });
        return;
      }
      const params = m.params;
      this.keep(m.method, params);
      this.emit("notification", m.method, params);
      this.emit(m.method, params);
      return;
    }
    if (typeof m.id !== "number") return; // a response to a frame sent with sendFrame, or id null
    const entry = this.settle(m.id);
    if (!entry) return;
    if (m.error && typeof m.error === "object") {
      entry.reject(new RpcError(m.error as { code: number; message: string; data?: unknown }, entry.method));
    } else {
      entry.resolve(m.result);
    }
  }

  /** Stdout ended or the process exited: with its stderr piped, the connection closes once
   * that is read too (or after EXIT_WAIT_MS), so the reason can be its `cannot start: …` line. */
  private ended(reason: string): void {
    this.endReason ??= reason;
    if (!this.stderrPiped) {
      this.shutdown(reason);
    } else if (this.endTimer === undefined && !this.closed) {
      this.endTimer = setTimeout(() => this.finish(), EXIT_WAIT_MS);
      this.endTimer.unref();
    }
  }

  private finish(): void {
    if (this.endTimer !== undefined) clearTimeout(this.endTimer);
    const line = this.stderrPiped ? cannotStartLine(this.stderrText) : undefined;
    if (line !== undefined) this.shutdown(line, true);
    else this.shutdown(this.endReason ?? "subagentd closed its stdout");
  }

  private closedError(method?: string): ConnectionClosedError {
    if (this.cannotStart) return new CannotStartError(this.closedReason);
    return new ConnectionClosedError(method ? `${this.closedReason} before answering ${method}` : this.closedReason);
  }

  private shutdown(reason: string, cannotStart = false): void {
    if (this.closed) return;
    this.closed = true;
    this.closedReason = reason;
    this.cannotStart = cannotStart;
    this.markShut();
    for (const [id, entry] of [...this.pending]) {
      this.settle(id);
      entry.reject(this.closedError(entry.method));
    }
  }

  // --- lifecycle ---------------------------------------------------------------------------------

  /** `initialize` (MCP handshake era) followed by `notifications/initialized`. */
  async initialize(
    params: InitializeParams & { statusEvents?: boolean } = {},
    options?: RequestOptions,
  ): Promise<InitializeResult> {
    const { statusEvents, ...rest } = params;
    const request: InitializeParams = {
      protocolVersion: DEFAULT_MCP_PROTOCOL_VERSION,
      clientInfo: { name: CLIENT_NAME, version: CLIENT_VERSION },
      ...rest,
    };
    if (statusEvents) {
      const capabilities = (request.capabilities ?? {}) as Record<string, any>;
      request.capabilities = {
        ...capabilities,
        experimental: {
          ...(capabilities.experimental ?? {}),
          subagentd: { ...(capabilities.experimental?.subagentd ?? {}), statusEvents: true },
        },
      };
    }
    const result = await this.request("initialize", request, options);
    this.notify("notifications/initialized", {});
    return result;
  }

  ping(options?: RequestOptions): Promise<Empty> {
    return this.request("ping", {}, options);
  }

  /** The `send_message` tool as a direct method (failures reject with `RpcError`). */
  sendMessage(params: SendMessageParams, options?: RequestOptions): Promise<SendMessageResult> {
    return this.request("send_message", params, options);
  }

  /** The `interrupt_agent` tool as a direct method. */
  interruptAgent(params: InterruptAgentParams, options?: RequestOptions): Promise<InterruptAgentResult> {
    return this.request("interrupt_agent", params, options);
  }

  /** The `list_agents` tool as a direct method. */
  listAgents(params: ListAgentsParams, options?: RequestOptions): Promise<ListAgentsResult> {
    return this.request("list_agents", params, options);
  }

  /** The `report` tool as a direct method. */
  report(params: ReportParams, options?: RequestOptions): Promise<ReportResult> {
    return this.request("report", params, options);
  }

  /** The `spawn_agent` tool as a direct method (agents/spawn's rules, as the calling agent). */
  spawnAgent(params: SpawnAgentParams, options?: RequestOptions): Promise<SpawnAgentResult> {
    return this.request("spawn_agent", params, options);
  }

  /** The `wait_agents` tool as a direct method: answered when the children have news. */
  waitAgents(params: WaitAgentsParams = {}, options?: RequestOptions): Promise<WaitAgentsResult> {
    return this.request("wait_agents", params, this.waitOptions(params.timeout_ms, options));
  }

  /** The `ask_parent` tool as a direct method: answered when the parent answers (or the
   * question ends unanswered, `answered: false`); its timeout covers an hour of waiting. */
  askParent(params: AskParentParams, options?: RequestOptions): Promise<AskParentResult> {
    return this.request("ask_parent", params, this.waitOptions(3_600_000, options));
  }

  /** The `ask_user` tool as a direct method (`--ask-user on`): answered when the person
   * answers, declines or dismisses the question (or it ends unanswered); an hour of waiting. */
  askUser(params: AskUserParams, options?: RequestOptions): Promise<AskUserResult> {
    return this.request("ask_user", params, this.waitOptions(3_600_000, options));
  }

  /** A waiting request's options: its timeout covers the server's wait (default 30 s) too. */
  private waitOptions(waitMs: number | undefined, options?: RequestOptions): RequestOptions {
    if (options?.timeoutMs !== undefined || !this.requestTimeoutMs) return options ?? {};
    return { ...options, timeoutMs: (waitMs ?? 30_000) + this.requestTimeoutMs };
  }

  /** Whether the connection is closed (the server exited or closed its stdout). */
  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * End stdin (the server drains, commits and exits) and wait for the exit code. After
   * `timeoutMs` the process is sent SIGTERM, and SIGKILL after as long again. Resolves once the
   * connection is closed too (`isClosed`; the process's exit can precede its stdio's end).
   */
  async close(timeoutMs = 10_000): Promise<number | null> {
    const child = this.process;
    if (!this.input.writableEnded) this.input.end();
    if (!child) return this.exited;
    if (child.exitCode === null && child.signalCode === null) {
      const timed = (ms: number) =>
        new Promise<"timeout">((resolve) => setTimeout(resolve, ms, "timeout").unref());
      if ((await Promise.race([this.exited, timed(timeoutMs)])) === "timeout") {
        child.kill("SIGTERM");
        if ((await Promise.race([this.exited, timed(timeoutMs)])) === "timeout") child.kill("SIGKILL");
      }
    }
    const code = await this.exited;
    await this.shut;
    return code;
  }
}
