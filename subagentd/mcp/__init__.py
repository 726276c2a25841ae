"""The MCP surface: the tools (`tools/list`, `tools/call`, the direct tool methods), their
schemas and the generated reference, who an MCP request acts for, resources and tasks.

Built on wire/ (a method is a wire `Handler`); the rules are core's.
"""
