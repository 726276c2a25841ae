// The official MCP TypeScript SDK client talks to subagentd over stdio.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ResultSchema } from "@modelcontextprotocol/sdk/types.js";

import { checkoutCommand, startServer } from "./helpers.js";

type Text = { type: string; text: string };

describe("official @modelcontextprotocol/sdk client over stdio", () => {
  let dir: string;
  let db: string;
  let mcp: Client;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "subagentd-mcp-"));
    db = join(dir, "mcp.db");
    // Prepare the database with our own client first (one process per database at a time):
    // root `root` with a ready continuable child `c1` labelled `worker`.
    const prep = startServer({ db });
    await prep.initialize();
    await prep.agents.open({ agent_id: "root" });
    const started = prep.waitFor("turn/start", { agent_id: "c1" });
    await prep.agents.spawn({ caller: "root", child_id: "c1", label: "worker", prompt: "go" });
    const turn = await started;
    const settled = prep.waitFor("agent/settled", { agent_id: "c1" });
    await prep.turns.end({ agent_id: "c1", turn_id: turn.turn_id, reason: "completed", output: "done" });
    await settled;
    assert.equal(await prep.close(), 0, prep.stderrText);

    const { command, args, cwd, env } = checkoutCommand(["--caller", "root", "--db", db]);
    const transport = new StdioClientTransport({
      command,
      args,
      cwd,
      env: env as Record<string, string>,
      stderr: "pipe",
    });
    mcp = new Client({ name: "subagentd-ts-interop", version: "0.0.0" });
    await mcp.connect(transport);
  });

  after(async () => {
    await mcp?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("the handshake names the server", () => {
    assert.equal(mcp.getServerVersion()?.name, "subagentd");
    assert.deepEqual(mcp.getServerCapabilities()?.tools, { listChanged: false });
  });

  test("tools/list has the root's tools (report is a child's)", async () => {
    const { tools } = await mcp.listTools();
    assert.deepEqual(
      tools.map((t) => t.name),
      ["send_message", "interrupt_agent", "list_agents", "wait_agents"],
    );
    for (const tool of tools) {
      assert.equal(tool.inputSchema.type, "object");
      assert.equal(tool.outputSchema?.type, "object");
    }
  });

  test("list_agents as the --caller", async () => {
    const result = await mcp.callTool({ name: "list_agents", arguments: { scope: "descendants" } });
    assert.equal(result.isError, false);
    assert.deepEqual(result.content, [{ type: "text", text: "c1 [ready, last turn completed] parent=root depth=1 — worker" }]);
    assert.deepEqual(result.structuredContent, {
      agents: [{ kind: "child", id: "c1", label: "worker", status: "ready", parent: "root", depth: 1, ended: "completed" }],
      text: "c1 [ready, last turn completed] parent=root depth=1 — worker",
    });
  });

  test("a tool failure is a result with isError, not a protocol error", async () => {
    const result = await mcp.callTool({ name: "send_message", arguments: { subagent_id: "nobody", message: "hi" } });
    assert.equal(result.isError, true);
    assert.deepEqual(result.content, [
      { type: "text", text: 'Error: message not delivered: subagent "nobody" is unavailable' },
    ]);
    const invalid = await mcp.callTool({ name: "interrupt_agent", arguments: { agent_id: 7 } });
    assert.equal(invalid.isError, true);
    assert.equal((invalid.content as Text[])[0]!.text, 'Error: invalid arguments: "agent_id" must be a string');
  });

  test("a _meta caller outside the --caller tree is refused (a confined connection)", async () => {
    const outside = (caller: string) =>
      `Error: agent "${caller}" is not "root" or a live agent below it; this connection acts only for that tree (--caller)`;
    const ready = await mcp.callTool({
      name: "list_agents",
      arguments: {},
      _meta: { "subagentd/caller": "c1" },
    });
    assert.equal(ready.isError, true); // below root, but not live
    assert.equal((ready.content as Text[])[0]!.text, outside("c1"));
    const ghost = await mcp.callTool({
      name: "interrupt_agent",
      arguments: { agent_id: "c1" },
      _meta: { "subagentd/caller": "ghost" },
    });
    assert.equal(ghost.isError, true);
    assert.equal((ghost.content as Text[])[0]!.text, outside("ghost"));
  });

  test("send_message resumes the ready child; the host API is not served to a confined client", async () => {
    const sent = await mcp.callTool({ name: "send_message", arguments: { subagent_id: "c1", message: "more" } });
    assert.equal(sent.isError, false);
    assert.deepEqual(sent.content, [{ type: "text", text: "message queued as the next turn for subagent c1" }]);
    const messageId = (sent.structuredContent as { message_id: string }).message_id;
    await assert.rejects(
      mcp.request({ method: "messages/get", params: { message_id: messageId } }, ResultSchema),
      (error: { code?: number }) => error.code === -32601,
    );
    const below = await mcp.callTool({ name: "list_agents", arguments: {}, _meta: { "subagentd/caller": "c1" } });
    assert.equal(below.isError, false); // c1 is live below root now
    assert.deepEqual(below.content, [{ type: "text", text: "(no subagents)" }]);
    const listing = await mcp.callTool({ name: "list_agents", arguments: {} });
    assert.deepEqual(listing.content, [{ type: "text", text: "c1 [running] — worker" }]);
  });
});
