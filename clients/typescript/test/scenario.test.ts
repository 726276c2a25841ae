// root -> c1 -> g1 and root -> c2, every turn run by runAgentHost against the real server.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ErrorCode, RpcError, runAgentHost, type ReportResult, type TurnReason, type TurnStart } from "../src/index.js";
import { deferred, startServer } from "./helpers.js";

const texts = (start: TurnStart, i = 0) => start.messages[i]!.content.map((b) => b.text);

test("a three-level tree plays out through the agent host helper", async () => {
  const client = startServer();
  await client.initialize();

  const turnsOf = new Map<string, TurnStart[]>();
  const ended: Array<[string, number, TurnReason, string | undefined]> = [];
  const errors: unknown[] = [];
  const g1Reported = deferred<ReportResult>();
  const c1Turn = [deferred<TurnStart>(), deferred<TurnStart>(), deferred<TurnStart>(), deferred<TurnStart>()];
  const c2Running = deferred<TurnStart>();
  const g1MayFinish = deferred();
  const c1MayFinish = deferred();
  const rootNotices = new Map<string, ReturnType<typeof deferred<TurnStart["messages"][number]>>>();
  const noticeFrom = (sender: string) => {
    if (!rootNotices.has(sender)) rootNotices.set(sender, deferred());
    return rootNotices.get(sender)!;
  };

  const host = runAgentHost(client, {
    async turn(start, signal) {
      const mine = turnsOf.get(start.agent_id) ?? [];
      mine.push(start);
      turnsOf.set(start.agent_id, mine);
      const n = mine.length;
      switch (start.agent_id) {
        case "root":
          for (const message of start.messages) {
            if (message.source.kind === "subagent-settled") noticeFrom(message.source.sender_session_id!).resolve(message);
          }
          return { output: "noted" };
        case "c1":
          c1Turn[n - 1]!.resolve(start);
          if (n === 1) {
            const g1 = await client.agents.spawn({
              caller: "c1",
              activation: start.activation_id,
              child_id: "g1",
              label: "leaf",
              prompt: "dig",
            });
            assert.equal(g1.text, "started subagent g1");
            return { output: "waiting for g1" };
          }
          if (n === 2) {
            await c1MayFinish.promise;
            return { output: "got the finding" };
          }
          if (n === 3) return { output: "summary for root" };
          return { output: "resumed and done" };
        case "g1": {
          g1Reported.resolve(await client.report({ caller: "g1", activation: start.activation_id, output: "found it" }));
          await g1MayFinish.promise;
          return { output: "leaf done" };
        }
        case "c2":
          c2Running.resolve(start);
          if (!signal.aborted) await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
          return {};
        default:
          throw new Error(`unexpected turn for ${start.agent_id}`);
      }
    },
    onError: (error) => errors.push(error),
    onTurnEnd: (start, outcome) =>
      ended.push([start.agent_id, turnsOf.get(start.agent_id)!.indexOf(start) + 1, outcome.reason, outcome.output]),
  });

  try {
    await client.agents.open({ agent_id: "root", label: "coordinator" });
    const c1 = await client.agents.spawn({ caller: "root", child_id: "c1", label: "researcher", prompt: "research" });
    assert.equal(c1.text, "started subagent c1");
    const first = await c1Turn[0]!.promise;
    assert.deepEqual(texts(first), ["research"]);
    assert.match(first.instructions ?? "", /report/);

    // The grandchild's report wakes the child: its next turn, never the running one.
    const report = await g1Reported.promise;
    assert.match(report.text, /^report accepted by the agent that started you as message [0-9a-f-]{36}$/);
    assert.equal(report.text, `report accepted by the agent that started you as message ${report.message_id}`);
    const second = await c1Turn[1]!.promise;
    assert.deepEqual(texts(second), ["Background subagent g1 reported:", "found it"]);
    assert.deepEqual(second.messages[0]!.source, { kind: "subagent-report", form: "relay", sender_session_id: "g1" });

    await client.agents.spawn({ caller: "root", child_id: "c2", label: "writer", prompt: "write" });
    await c2Running.promise;

    const descendants = await client.listAgents({ caller: "root", scope: "descendants" });
    assert.equal(
      descendants.text,
      "c1 [running] parent=root depth=1 — researcher\n" +
        "g1 [running] parent=c1 depth=2 — leaf\n" +
        "c2 [running] parent=root depth=1 — writer",
    );
    assert.deepEqual(descendants.agents[1], {
      kind: "child",
      id: "g1",
      label: "leaf",
      status: "running",
      parent: "c1",
      depth: 2,
    });
    const children = await client.listAgents({ caller: "root" });
    assert.equal(children.text, "c1 [running] — researcher\nc2 [running] — writer");
    assert.equal((await client.listAgents({ caller: "g1" })).text, "(no subagents)");

    // Lineage is enforced: siblings cannot interrupt each other, a grandparent cannot send.
    await assert.rejects(client.interruptAgent({ caller: "c1", agent_id: "c2" }), (error: unknown) => {
      assert.ok(error instanceof RpcError);
      assert.equal(error.code, ErrorCode.UNAUTHORIZED);
      assert.equal(error.message, 'subagent "c2" is a sibling of agent "c1", not its descendant');
      return true;
    });
    await assert.rejects(client.sendMessage({ caller: "root", subagent_id: "g1", message: "hi" }), {
      code: ErrorCode.UNAUTHORIZED,
      message: 'message not delivered: subagent "g1" belongs to another parent session',
    });

    // root interrupts its running child c2: the host aborts the turn, reports "aborted", c2 settles.
    const c2Settled = client.waitFor("agent/settled", { agent_id: "c2" });
    assert.deepEqual(await client.interruptAgent({ caller: "root", agent_id: "c2" }), {
      text: "interrupt requested for agent c2",
      accepted: true,
      previous_status: "running",
    });
    assert.deepEqual(await c2Settled, { agent_id: "c2", reason: "aborted" });
    const c2Notice = await noticeFrom("c2").promise;
    assert.deepEqual(
      c2Notice.content.map((b) => b.text),
      ["Background subagent c2 was stopped before it finished.", "It left no closing message."],
    );
    assert.deepEqual(c2Notice.source, {
      kind: "subagent-settled",
      form: "notice",
      summary: "Background subagent c2 was stopped before it finished.",
      sender_session_id: "c2",
    });

    // g1 finishes while c1 is busy: c1 gets the settlement notice as its next turn.
    const g1Settled = client.waitFor("agent/settled", { agent_id: "g1" });
    g1MayFinish.resolve();
    assert.deepEqual(await g1Settled, { agent_id: "g1", reason: "completed" });
    assert.equal((await client.agents.get({ agent_id: "c1" })).status, "running");
    const c1Settled = client.waitFor("agent/settled", { agent_id: "c1" });
    c1MayFinish.resolve();
    const third = await c1Turn[2]!.promise;
    assert.deepEqual(texts(third), [
      "Background subagent g1 finished and will do no further work unless you send it more.",
      "Its closing message:",
      "leaf done",
    ]);
    assert.deepEqual(await c1Settled, { agent_id: "c1", reason: "completed" });
    const c1Notice = await noticeFrom("c1").promise;
    assert.deepEqual(c1Notice.content.map((b) => b.text), [
      "Background subagent c1 finished and will do no further work unless you send it more.",
      "Its closing message:",
      "summary for root",
    ]);
    await host.idle();

    assert.equal(
      (await client.listAgents({ caller: "root", scope: "descendants" })).text,
      "c1 [ready, last turn completed] parent=root depth=1 — researcher\n" +
        "g1 [ready, last turn completed] parent=c1 depth=2 — leaf\n" +
        "c2 [ready, last turn was stopped] parent=root depth=1 — writer",
    );

    // send_message to a ready child resumes it cold, from its descriptor.
    const resumedSettled = client.waitFor("agent/settled", { agent_id: "c1" });
    const sent = await client.sendMessage({ caller: "root", subagent_id: "c1", message: "one more thing" });
    assert.equal(sent.text, "message queued as the next turn for subagent c1");
    const fourth = await c1Turn[3]!.promise;
    assert.deepEqual(fourth.resume, { version: 1, mode: "continuable", label: "researcher" });
    assert.notEqual(fourth.activation_id, first.activation_id);
    assert.deepEqual(texts(fourth), ["one more thing"]);
    assert.deepEqual(fourth.messages[0]!.source, { kind: "coordinator", form: "relay", sender_session_id: "root" });
    await resumedSettled;
    await new Promise((resolve) => setTimeout(resolve, 50));
    await host.idle();

    assert.deepEqual(
      ended.filter(([agent]) => agent !== "root"),
      [
        ["c1", 1, "completed", "waiting for g1"],
        ["c2", 1, "aborted", undefined],
        ["g1", 1, "completed", "leaf done"],
        ["c1", 2, "completed", "got the finding"],
        ["c1", 3, "completed", "summary for root"],
        ["c1", 4, "completed", "resumed and done"],
      ],
    );
    assert.ok(ended.filter(([agent]) => agent === "root").length >= 3);
    assert.deepEqual(errors, []);

    assert.deepEqual(await client.agents.close({ agent_id: "root" }), {});
    assert.equal((await client.agents.get({ agent_id: "root" })).status, "ready");
  } finally {
    host.stop();
    assert.equal(await client.close(), 0, client.stderrText);
  }
});
