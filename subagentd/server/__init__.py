"""The server: the I/O loop and the dispatcher, put together from wire/ and mcp/.

The connection (read, dispatch, group commit, write, shutdown), the transport-free
`Dispatcher` (the envelope rules, batches, cancellation, confinement), the host API's
methods and the handshake's, the start-up fast path, the OpenRPC document.
"""
