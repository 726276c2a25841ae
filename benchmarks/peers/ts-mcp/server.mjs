// The peer a TypeScript user would pick: the official MCP TypeScript SDK (McpServer) serving one
// trivial tool over stdio, the counterpart of ../mcp_sdk_server.py: the same tool, input and output
// schemas, and the same result (the Python SDK wraps a str return as {"result": …} structured
// content beside the text block).
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "bench-peer", version: "0" });

server.registerTool(
  "list_agents",
  {
    description: "Return a constant listing (the cheapest possible tool).",
    inputSchema: { scope: z.string().default("children") },
    outputSchema: { result: z.string() },
  },
  async () => ({
    content: [{ type: "text", text: "(no subagents)" }],
    isError: false,
    structuredContent: { result: "(no subagents)" },
  }),
);

await server.connect(new StdioServerTransport());
