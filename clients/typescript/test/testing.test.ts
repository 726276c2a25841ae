// The test kit (`@subagentd/client/testing`) and `waitFor` matching notifications already received.

import assert from "node:assert/strict";
import { after, test } from "node:test";

import type { SubagentdClient } from "../src/index.js";
import { ScriptedHost, ScriptedHostError, serveSubagentd, stopSubagentd } from "../src/testing.js";
import { checkoutCommand } from "./helpers.js";

const clients: SubagentdClient[] = [];
after(async () => {
  for (const client of clients) await stopSubagentd(client);
});

async function served(extraArgs: string[] = []): Promise<SubagentdClient> {
  const { command, args, cwd, env } = checkoutCommand(extraArgs);
  const client = await serveSubagentd({ command, args, cwd, env });
  clients.push(client);
  return client;
}

test("waitFor matches a notification that arrived before the call (and returns it once)", async () => {
  const client = await served();
  await client.agents.open({ agent_id: "root" });
  await client.agents.spawn({ caller: "root", child_id: "c1", label: "w", prompt: "go" });
  await client.ping(); // replies come in order: the child's turn/start has arrived by now
  const start = await client.waitFor("turn/start", { agent_id: "c1" }, 2_000);
  assert.equal(start.agent_id, "c1");
  await assert.rejects(client.waitFor("turn/start", { agent_id: "c1" }, 200), {
    message:
      'no turn/start notification matching {"agent_id":"c1"} within 200 ms; the turn/start notifications received:\n' +
      `  ${JSON.stringify(start)} (taken)`,
  });
  await client.turns.end({ agent_id: "c1", turn_id: start.turn_id, reason: "completed" });
  await client.waitFor("turn/start", { agent_id: "root" });
});

test("a scripted host runs a tree from its table of replies", async () => {
  const client = await served();
  await client.agents.open({ agent_id: "root" });
  await client.agents.spawn({ caller: "root", child_id: "c1", label: "researcher", prompt: "Find X." });
  const host = new ScriptedHost(client, { c1: ["X is 42."], root: [{ output: "thanks" }] });
  const turns = await host.runUntilIdle("root");
  assert.deepEqual(
    turns.map((t) => [t.agent_id, t.reason, t.output]),
    [
      ["c1", "completed", "X is 42."],
      ["root", "completed", "thanks"],
    ],
  );
  assert.deepEqual(turns[0]!.texts, ["Find X."]);
  assert.deepEqual(turns[1]!.texts, [
    "Background subagent c1 finished and will do no further work unless you send it more.",
    "Its closing message:",
    "X is 42.",
  ]);
  assert.deepEqual(host.left(), { c1: 0, root: 0 });
  // agent/settled came while the host ran: still matched
  assert.deepEqual(await client.waitFor("agent/settled", { agent_id: "c1" }), { agent_id: "c1", reason: "completed" });
});

test("a turn without a reply fails naming the agent and its turn", async () => {
  const client = await served();
  await client.agents.open({ agent_id: "root" });
  await client.agents.spawn({ caller: "root", child_id: "c1", label: "w", prompt: "go" });
  const host = new ScriptedHost(client, { c1: ["first"] });
  await assert.rejects(host.runUntilIdle("root"), (error: unknown) => {
    assert.ok(error instanceof ScriptedHostError);
    assert.match(
      error.message,
      /^scripted host: agent "root" started its turn 1, but the table has 0 replies for it; the turn's input: \["/,
    );
    return true;
  });
  assert.equal((await client.agents.waitIdle({ agent_id: "root", timeout_ms: 5000 })).idle, true);
});

test("replies may call tools before they end the turn", async () => {
  const client = await served();
  await client.agents.open({ agent_id: "root" });
  await client.agents.spawn({ caller: "root", child_id: "c1", label: "w", prompt: "go" });
  const host = new ScriptedHost(client, {
    c1: [
      async (start) => {
        await client.report({ caller: start.agent_id, output: "half way" });
        return "all done";
      },
    ],
    root: ["r1", "r2"],
  });
  const turns = await host.runUntilIdle("root");
  assert.deepEqual(
    turns.map((t) => t.agent_id),
    ["c1", "root", "root"],
  );
});
