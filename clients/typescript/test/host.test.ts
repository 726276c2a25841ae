// runAgentHost fails loudly: a throwing turn is reported and ends "error" with its message.

import assert from "node:assert/strict";
import { test } from "node:test";

import { runAgentHost, type TurnReason, type TurnStart } from "../src/index.js";
import { deferred, startServer } from "./helpers.js";

/** A root whose child's turn throws; resolves with the notice the root gets. */
async function failingChild(onError?: (error: unknown, start: TurnStart) => void) {
  const client = startServer();
  await client.initialize();
  const ended: Array<[string, TurnReason, string | undefined]> = [];
  const notice = deferred<TurnStart["messages"][number]>();
  const host = runAgentHost(client, {
    async turn(start) {
      if (start.agent_id === "root") {
        notice.resolve(start.messages[0]!);
        return { output: "noted" };
      }
      throw new Error("the model is unavailable");
    },
    ...(onError ? { onError } : {}),
    onTurnEnd: (start, outcome) => ended.push([start.agent_id, outcome.reason, outcome.output]),
  });
  await client.agents.open({ agent_id: "root" });
  const settled = client.waitFor("agent/settled", { agent_id: "c1" });
  await client.agents.spawn({ caller: "root", child_id: "c1", label: "worker", prompt: "work" });
  assert.deepEqual(await settled, { agent_id: "c1", reason: "error" });
  const message = await notice.promise;
  await host.idle();
  host.stop();
  assert.equal(await client.close(), 0);
  return { ended, message };
}

test("a turn that throws ends with reason error, its message as output, and reaches onError", async () => {
  const errors: Array<[unknown, string]> = [];
  const { ended, message } = await failingChild((error, start) => errors.push([error, start.agent_id]));
  assert.equal(errors.length, 1);
  assert.equal(errors[0]![1], "c1");
  assert.ok(errors[0]![0] instanceof Error);
  assert.equal((errors[0]![0] as Error).message, "the model is unavailable");
  assert.deepEqual(ended[0], ["c1", "error", "the model is unavailable"]);
  assert.deepEqual(
    message.content.map((b) => b.text),
    ["Background subagent c1 failed before it finished.", "Its closing message:", "the model is unavailable"],
  );
});

test("without onError the failure is printed to stderr", async () => {
  const printed: unknown[][] = [];
  const original = console.error;
  console.error = (...args: unknown[]) => void printed.push(args);
  let ended;
  try {
    ({ ended } = await failingChild());
  } finally {
    console.error = original;
  }
  assert.deepEqual(ended[0], ["c1", "error", "the model is unavailable"]);
  assert.equal(printed.length, 1);
  assert.match(String(printed[0]![0]), /^subagentd: turn \S+ of agent "c1" failed:$/);
  assert.equal((printed[0]![1] as Error).message, "the model is unavailable");
});

test("a turn that throws because it was interrupted is reported aborted, not as an error", async () => {
  const client = startServer();
  await client.initialize();
  const errors: unknown[] = [];
  const ended: Array<[TurnReason, string | undefined]> = [];
  const running = deferred();
  const host = runAgentHost(client, {
    async turn(start, signal) {
      if (start.agent_id === "root") return {};
      running.resolve();
      await new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason), { once: true }));
      return {};
    },
    onError: (error) => errors.push(error),
    onTurnEnd: (start, outcome) => {
      if (start.agent_id === "c1") ended.push([outcome.reason, outcome.output]);
    },
  });
  try {
    await client.agents.open({ agent_id: "root" });
    const settled = client.waitFor("agent/settled", { agent_id: "c1" });
    await client.agents.spawn({ caller: "root", child_id: "c1", label: "worker", prompt: "work" });
    await running.promise;
    await client.agents.interrupt({ agent_id: "c1" });
    assert.deepEqual(await settled, { agent_id: "c1", reason: "aborted" });
    await host.idle();
    assert.deepEqual(ended, [["aborted", undefined]]);
    assert.deepEqual(errors, []);
  } finally {
    host.stop();
    await client.close();
  }
});
