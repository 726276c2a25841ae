"""The wire: bytes to frames to JSON-RPC messages and back.

The transport (fds over anyio) and framing (NDJSON, LSP), the one exception-to-wire
boundary, a method's entry (`Handler`, `Call`) and the one method table, jsonrpcserver's
entries, the ledger that holds replies until their group commits, waiting for another
process's write lock, timers, the event loops. It knows no method and no MCP: the pieces
server/ puts together.
"""
