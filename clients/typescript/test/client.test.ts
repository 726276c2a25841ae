import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  CannotStartError,
  ConnectionClosedError,
  ErrorCode,
  METHOD_NAMES,
  RpcError,
  RpcTimeoutError,
  SubagentdClient,
  type TurnStart,
} from "../src/index.js";
import { OPENRPC_PATH, startServer } from "./helpers.js";

describe("SubagentdClient against the real server", () => {
  let client: SubagentdClient;

  before(async () => {
    client = startServer();
  });
  after(async () => {
    assert.equal(await client.close(), 0, client.stderrText);
  });

  test("requests before initialize are refused with NOT_INITIALIZED", async () => {
    await assert.rejects(client.agents.get({ agent_id: "x" }), (error: unknown) => {
      assert.ok(error instanceof RpcError);
      assert.equal(error.code, ErrorCode.NOT_INITIALIZED);
      assert.equal(error.method, "agents/get");
      return true;
    });
    assert.deepEqual(await client.ping(), {});
  });

  test("initialize negotiates the handshake era", async () => {
    const result = await client.initialize();
    assert.equal(result.protocolVersion, "2025-06-18");
    assert.equal(result.serverInfo.name, "subagentd");
    const experimental = result.capabilities.experimental as { subagentd: { protocol: number } };
    assert.equal(experimental.subagentd.protocol, 1);
    const discover = await client.server.discover();
    assert.ok(discover.supportedVersions.includes("2025-06-18"));
  });

  test("errors are typed RpcErrors with code, message and data", async () => {
    await client.agents.open({ agent_id: "root", label: "coordinator" });
    await assert.rejects(
      client.sendMessage({ caller: "root", subagent_id: "nobody", message: "hi" }),
      (error: unknown) => {
        assert.ok(error instanceof RpcError);
        assert.equal(error.code, ErrorCode.NOT_RESUMABLE);
        assert.equal(error.message, 'message not delivered: subagent "nobody" is unavailable');
        assert.deepEqual(error.data, {
          reason: "UNKNOWN_AGENT", // the host is told "nobody" does not exist
          text: 'Error: message not delivered: subagent "nobody" is unavailable',
        });
        return true;
      },
    );
    await assert.rejects(client.request("no/such/method", {}), { code: ErrorCode.METHOD_NOT_FOUND });
    await assert.rejects(client.request("agents/spwan", {}), {
      code: ErrorCode.METHOD_NOT_FOUND,
      data: { method: "agents/spwan", closest: "agents/spawn" },
    });
  });

  test("notifications are events, by name and generically", async () => {
    const seen: string[] = [];
    const onAny = (method: string) => seen.push(method);
    client.on("notification", onAny);
    const started = client.waitFor("turn/start", { agent_id: "c1" });
    const spawned = await client.agents.spawn({ caller: "root", child_id: "c1", label: "worker", prompt: "go" });
    assert.equal(spawned.text, "started subagent c1");
    const start: TurnStart = await started;
    assert.equal(start.messages[0]!.content[0]!.text, "go");
    assert.deepEqual(start.messages[0]!.source, { kind: "coordinator", form: "spawn", sender_session_id: "root" });
    assert.ok(start.instructions);
    const info = await client.messages.get({ message_id: spawned.message_id });
    assert.equal(info.state, "claimed");
    assert.equal(info.turn_id, start.turn_id);
    const settled = client.waitFor("agent/settled", { agent_id: "c1" });
    const notice = client.waitFor("turn/start", { agent_id: "root" });
    await client.turns.end({ agent_id: "c1", turn_id: start.turn_id, reason: "completed", output: "done" });
    assert.deepEqual(await settled, { agent_id: "c1", reason: "completed" });
    // The settlement notice wakes the root: its next turn.
    const rootTurn = await notice;
    assert.deepEqual(rootTurn.messages[0]!.content.map((b) => b.text), [
      "Background subagent c1 finished and will do no further work unless you send it more.",
      "Its closing message:",
      "done",
    ]);
    assert.equal(rootTurn.messages[0]!.source.kind, "subagent-settled");
    await client.turns.end({ agent_id: "root", turn_id: rootTurn.turn_id, reason: "completed" });
    client.off("notification", onAny);
    assert.ok(seen.includes("turn/start") && seen.includes("agent/settled"), seen.join());
  });

  test("the rest of the host API round-trips", async () => {
    const { seq } = await client.transcript.append({
      agent_id: "root",
      events: [{ type: "assistant", data: { text: "hello" } }],
    });
    const read = await client.transcript.read({ agent_id: "root", after: seq - 1 });
    assert.deepEqual(read.events.map((e) => [e.type, e.data]), [["assistant", { text: "hello" }]]);
    const { turn_id } = await client.turns.begin({ agent_id: "root", messages: ["hi"] });
    // its turn/start is kept for waitFor until taken: take it, so a later wait gets the next one
    assert.equal((await client.waitFor("turn/start", { agent_id: "root" })).turn_id, turn_id);
    await client.turns.end({ agent_id: "root", turn_id, reason: "completed" });
    const followup = await client.agents.followup({ agent_id: "c1", message: "more" });
    assert.ok(followup.message_id);
    const list = await client.agents.list({ root_id: "root" });
    assert.deepEqual(list.agents.map((a) => a.id), ["c1"]);
    const agent = await client.agents.get({ agent_id: "root" });
    assert.equal(agent.status, "idle");
    // c1 settled (it is not live): the host-level interrupt has nothing to stop.
    assert.deepEqual(await client.agents.interrupt({ agent_id: "c1" }), { accepted: false, previous_status: "ready" });
    const tools = await client.tools.list({ _meta: { "subagentd/caller": "root" } });
    assert.deepEqual(tools.tools.map((t) => t.name), ["send_message", "interrupt_agent", "list_agents", "wait_agents"]);
    const called = await client.tools.call({ name: "list_agents", arguments: {}, _meta: { "subagentd/caller": "c1" } });
    assert.deepEqual(called.content, [{ type: "text", text: "(no subagents)" }]);
    assert.equal(called.isError, false);
  });

  test("agents.waitIdle answers once the tree is quiet, and names the busy on timeout", async () => {
    const started = client.waitFor("turn/start", { agent_id: "w1" });
    await client.agents.spawn({ caller: "root", child_id: "w1", label: "waiter", prompt: "go" });
    const w1 = await started;
    assert.deepEqual(await client.agents.waitIdle({ agent_id: "root", timeout_ms: 0 }), { idle: false, running: ["w1"] });
    const quiet = client.agents.waitIdle({ agent_id: "root" });
    const notice = client.waitFor("turn/start", { agent_id: "root" });
    await client.turns.end({ agent_id: "w1", turn_id: w1.turn_id, reason: "completed" });
    const rootTurn = await notice; // w1 settled: the root runs its notice
    await client.turns.end({ agent_id: "root", turn_id: rootTurn.turn_id, reason: "completed" });
    assert.deepEqual(await quiet, { idle: true });
  });

  test("spawnAgent and waitAgents as direct methods", async () => {
    const { turn_id } = await client.turns.begin({ agent_id: "root", messages: ["delegate"] });
    const started = client.waitFor("turn/start", { agent_id: "w2" });
    const spawned = await client.spawnAgent({ caller: "root", label: "l", prompt: "p", child_id: "w2" });
    assert.deepEqual([spawned.child_id, spawned.text], ["w2", "started subagent w2"]);
    await started;
    await client.report({ caller: "w2", output: "found" });
    const news = await client.waitAgents({ caller: "root", agent_ids: ["w2"] });
    assert.deepEqual(news.blocks, ["Background subagent w2 reported:", "found", "still working: w2"]);
    await client.turns.end({ agent_id: "root", turn_id, reason: "completed" });
  });

  test("a request with a signal that aborts is rejected and cancelled", async () => {
    const controller = new AbortController();
    controller.abort(new Error("never mind"));
    await assert.rejects(client.ping({ signal: controller.signal }), /never mind/);
  });

  test("sendRaw and frame events see every frame", async () => {
    const frame = new Promise((resolve) => client.once("frame", resolve));
    client.sendRaw("{not json");
    assert.deepEqual(await frame, {
      jsonrpc: "2.0",
      id: null,
      error: (await frame as { error: { code: number; message: string } }).error,
    });
    assert.equal((await frame as { error: { code: number } }).error.code, ErrorCode.PARSE_ERROR);
  });

  test("every request method of the OpenRPC document has a typed wrapper", () => {
    const doc = JSON.parse(readFileSync(OPENRPC_PATH, "utf8")) as { methods: { name: string; "x-notification"?: boolean }[] };
    const names = doc.methods.filter((m) => !m["x-notification"]).map((m) => m.name).sort();
    assert.deepEqual(names, [...METHOD_NAMES]);
    const camel = (s: string) => s.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
    for (const name of names) {
      const parts = name.split("/");
      let target: unknown = client;
      for (const part of parts) target = (target as Record<string, unknown>)[camel(part)];
      assert.equal(typeof target, "function", `no wrapper for ${name}`);
    }
  });
});

test("a request with no answer times out with RpcTimeoutError", async () => {
  // `cat` echoes requests back; they are requests, not responses, and the client answers them
  // with -32601, which cat echoes as responses with unknown ids... so use `sleep` instead.
  const silent = new SubagentdClient({ command: "sleep", args: ["30"], requestTimeoutMs: 200 });
  await assert.rejects(silent.ping(), (error: unknown) => error instanceof RpcTimeoutError && error.method === "ping");
  silent.process!.kill();
  await silent.close();
});

test("a command that cannot run rejects pending requests", async () => {
  const missing = new SubagentdClient({ command: "/nonexistent/subagentd" });
  await assert.rejects(missing.ping(), /could not run subagentd|exited/);
  assert.equal(await missing.close(), null);
});

test("a subagentd that cannot start rejects with its own `cannot start: …` line", async () => {
  const dir = mkdtempSync(join(tmpdir(), "subagentd-ts-"));
  const db = join(dir, "bad.db");
  writeFileSync(db, "not a database\n", { mode: 0o600 });
  for (const extraArgs of [[], ["--log-format", "json"]]) {
    const client = startServer({ db, extraArgs });
    await assert.rejects(client.initialize(), (error: unknown) => {
      assert.ok(error instanceof CannotStartError && error instanceof ConnectionClosedError);
      assert.equal(error.message, `cannot start: ${db} is not a SQLite database`);
      return true;
    });
    await assert.rejects(client.ping(), CannotStartError); // and every later request
    assert.equal(await client.close(), 1);
  }
  rmSync(dir, { recursive: true });
});

test("close() ends stdin and resolves with exit code 0", async () => {
  const client = startServer();
  await client.initialize();
  await client.agents.open({ agent_id: "r" });
  assert.equal(await client.close(), 0);
  assert.ok(client.isClosed);
  await assert.rejects(client.ping(), /exited|closed/);
});
