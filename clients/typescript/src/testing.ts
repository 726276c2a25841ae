// A test kit for host authors (`@subagentd/client/testing`): a subagentd served to a test, a
// scripted host that answers turns from a table of replies, and `client.waitFor`, which matches a
// notification already received. The same helpers, with the same semantics, as Python's
// subagentd.testing and Go's subagentdtest (docs/testing.md).

import { SubagentdClient, type SubagentdClientOptions } from "./client.js";
import type { TurnOutcome } from "./host.js";
import type { TurnStart } from "./types.js";

/** Milliseconds a kit wait lasts unless told otherwise. */
export const WAIT_MS = 10_000;

export interface ServeOptions extends SubagentdClientOptions {
  /** clientInfo.name of `initialize`. Default `"node-test"`. */
  clientName?: string;
}

/**
 * A fresh subagentd (`--db :memory:` unless `db` or `args` name a database), initialized.
 * Close it with `stopSubagentd` after the test (e.g. in `after`).
 */
export async function serveSubagentd(options: ServeOptions = {}): Promise<SubagentdClient> {
  const { clientName = "node-test", ...rest } = options;
  const named = rest.db !== undefined || (rest.args ?? []).some((a) => a === "--db" || a.startsWith("--db="));
  const client = new SubagentdClient({ requestTimeoutMs: WAIT_MS, ...rest, db: named ? rest.db : ":memory:" });
  try {
    await client.initialize({ clientInfo: { name: clientName, version: "0" } });
  } catch (error) {
    await client.close();
    throw error;
  }
  return client;
}

/** Close subagentd's stdin and wait for it; throws unless it exited 0 (with its log tail). */
export async function stopSubagentd(client: SubagentdClient, timeoutMs = WAIT_MS): Promise<void> {
  const code = await client.close(timeoutMs);
  if (code !== 0) {
    throw new Error(`subagentd exited with status ${code} after the test: ${client.stderrText.slice(-2000)}`);
  }
}

/**
 * A scripted turn: its output (the turn ends completed), a TurnOutcome, or a function of the
 * turn/start (which may call tools first) returning either, or nothing (completed, no output).
 */
export type Reply =
  | string
  | TurnOutcome
  | ((start: TurnStart) => string | TurnOutcome | void | Promise<string | TurnOutcome | void>);

/** A turn the scripted host ran: whose, its input (each text block of its messages), its end. */
export interface Turn {
  agent_id: string;
  turn_id: string;
  texts: string[];
  reason: NonNullable<TurnOutcome["reason"]>;
  output?: string;
}

/** The server asked for a turn the table has no reply for, or no turn came in time. */
export class ScriptedHostError extends Error {
  override name = "ScriptedHostError";
}

/** Answers `turn/start`s from `replies`: agent id -> its replies, one per turn, in order. */
export class ScriptedHost {
  readonly turns: Turn[] = [];
  private readonly used = new Map<string, number>();

  constructor(
    readonly client: SubagentdClient,
    readonly replies: Record<string, Reply[]>,
  ) {
    for (const agent of Object.keys(replies)) this.used.set(agent, 0);
  }

  /** Take the next `turn/start` (received already or within `timeoutMs`), end it with its agent's next reply. */
  async runTurn(timeoutMs = WAIT_MS): Promise<Turn> {
    let start: TurnStart;
    try {
      start = await this.client.waitFor("turn/start", {}, timeoutMs);
    } catch {
      throw new ScriptedHostError(`scripted host: no turn/start within ${timeoutMs} ms`);
    }
    const agent = start.agent_id;
    const texts = start.messages.flatMap((m) => m.content.map((b) => b.text));
    const number = (this.used.get(agent) ?? 0) + 1;
    const table = this.replies[agent] ?? [];
    if (number > table.length) {
      const why = `scripted host: no reply left for turn ${number} of agent ${JSON.stringify(agent)}`;
      await this.client.turns.end({ agent_id: agent, turn_id: start.turn_id, reason: "error", output: why });
      throw new ScriptedHostError(
        `scripted host: agent ${JSON.stringify(agent)} started its turn ${number}, but the table has ` +
          `${table.length} ${table.length === 1 ? "reply" : "replies"} for it; the turn's input: ${JSON.stringify(texts)}`,
      );
    }
    this.used.set(agent, number);
    const reply = table[number - 1]!;
    const said = typeof reply === "function" ? await reply(start) : reply;
    const outcome: TurnOutcome = typeof said === "string" ? { output: said } : (said ?? {});
    const reason = outcome.reason ?? "completed";
    const ended: Parameters<SubagentdClient["turns"]["end"]>[0] = { agent_id: agent, turn_id: start.turn_id, reason };
    if (outcome.output !== undefined) ended.output = outcome.output;
    await this.client.turns.end(ended);
    const turn: Turn = { agent_id: agent, turn_id: start.turn_id, texts, reason };
    if (outcome.output !== undefined) turn.output = outcome.output;
    this.turns.push(turn);
    return turn;
  }

  /**
   * Run turns until no agent of `agentId`'s tree runs one or has input to start one
   * (agents/wait_idle); the turns run. Each wait for a turn/start is bounded by `timeoutMs`.
   */
  async runUntilIdle(agentId: string, timeoutMs = WAIT_MS): Promise<Turn[]> {
    const ran: Turn[] = [];
    for (;;) {
      const idle = await this.client.agents.waitIdle({ agent_id: agentId, timeout_ms: 0 });
      if (idle.idle) return ran;
      try {
        ran.push(await this.runTurn(timeoutMs));
      } catch (error) {
        if (!(error instanceof ScriptedHostError)) throw error;
        const busy = `running ${JSON.stringify(idle.running ?? [])}, runnable ${JSON.stringify(idle.runnable ?? [])}`;
        throw new ScriptedHostError(`${error.message} while the tree of ${JSON.stringify(agentId)} is busy (${busy})`);
      }
    }
  }

  /** Replies not used yet, by agent (a test may assert they are all zero). */
  left(): Record<string, number> {
    return Object.fromEntries(Object.entries(this.replies).map(([a, rs]) => [a, rs.length - (this.used.get(a) ?? 0)]));
  }
}
