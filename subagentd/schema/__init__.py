"""Wire types: msgspec Structs for every params, result and notification, and the error codes."""
