import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

import { Bindings, parseScript, replay } from "./replay.js";
import { REPO_ROOT, startServer } from "./helpers.js";

const SCRIPTS = join(REPO_ROOT, "tests", "scripts");
const files = existsSync(SCRIPTS) ? readdirSync(SCRIPTS).filter((f) => f.endsWith(".jsonl")).sort() : [];

describe("scripted transcripts in tests/scripts, each against a fresh server", () => {
  if (files.length === 0) {
    test("tests/scripts has no *.jsonl scripts", { skip: "no scripted transcripts in this checkout" }, () => {});
  }
  for (const file of files) {
    test(file, async () => {
      const steps = parseScript(readFileSync(join(SCRIPTS, file), "utf8"));
      const client = startServer();
      try {
        await replay(client, steps);
      } catch (error) {
        await client.close();
        throw new Error(`${file}: ${(error as Error).message}\n--- server stderr ---\n${client.stderrText.slice(-4000)}`);
      }
      assert.equal(await client.close(), 0, `${file}: exit code\n${client.stderrText.slice(-4000)}`);
    });
  }
});

describe("the replayer itself", () => {
  test("captures, substitutes and compares exactly", async () => {
    const script = [
      '{"comment": "a self-test of the replayer"}',
      '',
      '{"send": {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}}',
      '{"expect": {"jsonrpc": "2.0", "id": 1, "result": "${init}"}}',
      '{"send": {"jsonrpc": "2.0", "method": "notifications/initialized"}}',
      '{"send": {"jsonrpc": "2.0", "id": 2, "method": "agents/open", "params": {"agent_id": "root"}}}',
      '{"expect": {"jsonrpc": "2.0", "id": 2, "result": {"agent_id": "root", "activation_id": "${act}"}}}',
      '{"send": {"jsonrpc": "2.0", "id": 3, "method": "list_agents", "params": {"caller": "root", "activation": "${act}"}}}',
      '{"expect": {"jsonrpc": "2.0", "id": 3, "result": {"text": "(no subagents)", "agents": []}}}',
      '{"send_raw": "[{\\"jsonrpc\\": \\"2.0\\", \\"id\\": 4, \\"method\\": \\"ping\\"}, {\\"jsonrpc\\": \\"2.0\\", \\"method\\": \\"ping\\"}]"}',
      '{"expect": [{"jsonrpc": "2.0", "id": 4, "result": {}}]}',
      '{"send_raw": "{oops"}',
      '{"expect": {"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "${_}", "data": "${_}"}}}',
    ].join("\n");
    const client = startServer();
    try {
      const bindings = await replay(client, parseScript(script));
      assert.equal(typeof bindings.values.get("act"), "string");
      assert.equal((bindings.values.get("init") as { serverInfo: { name: string } }).serverInfo.name, "subagentd");
    } finally {
      assert.equal(await client.close(), 0);
    }
  });

  test("a mismatch names the path", () => {
    const b = new Bindings();
    assert.equal(b.match({ a: [1, "${x}"] }, { a: [1, "v"] }), null);
    assert.equal(b.values.get("x"), "v");
    assert.match(b.match({ a: [1, "${x}"] }, { a: [1, "w"] })!, /\$\.a\[1\]: expected \$\{x\} = "v"/);
    assert.match(b.match({ a: 1 }, { a: 1, b: 2 })!, /unexpected "b"/);
    assert.match(b.match({ a: 1, b: 2 }, { a: 1 })!, /missing "b"/);
    assert.equal(b.match("${_}", { anything: true }), null);
    assert.deepEqual(b.substitute({ id: "${x}", text: "to ${x}!", "${x}": 1 }), { id: "v", text: "to ${x}!", "${x}": 1 });
    assert.throws(() => b.substitute("${nothing}"), /before it was recorded/);
    assert.equal(b.match(1, true), "$: expected 1, got true");
    assert.equal(b.match("1", 1), '$: expected "1", got 1');
  });

  test("a frame the script did not expect fails the run at its end", async () => {
    const client = startServer();
    try {
      await assert.rejects(
        replay(client, parseScript('{"send": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}')),
        /after the last step: unexpected frame \{"jsonrpc":"2.0","result":\{\},"id":1\}/,
      );
    } finally {
      await client.close();
    }
  });

  test("a script that expects what never comes fails with the step", async () => {
    assert.throws(() => parseScript('{"send": 1, "comment": "two keys"}'), /exactly one/);
    assert.throws(() => parseScript('{"sleep": 1}'), /exactly one/);
    const client = startServer();
    try {
      await assert.rejects(
        replay(client, parseScript('{"send": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}\n{"expect": {"jsonrpc": "2.0", "id": 1, "result": {"x": 1}}}')),
        /step 2: \$\.result: missing "x"/,
      );
    } finally {
      await client.close();
    }
  });
});
