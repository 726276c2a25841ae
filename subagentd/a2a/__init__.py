"""The A2A face (`subagentd a2a`, docs/a2a.md): one root's children served to A2A 1.0 clients
over JSON-RPC and HTTP, driving a `subagentd serve --caller ROOT` child process through the
project's own client; the `a2a-sdk` package (the `a2a` extra) speaks the protocol."""
