"""Run in the LangChain environment: convert each tool (a JSON list on stdin) with
`convert_to_openai_tool(strict=True)`, as LangChain does for OpenAI's strict function calling,
and print the converted parameters as one JSON list."""

import json
import sys

from langchain_core.utils.function_calling import convert_to_openai_tool

tools = json.load(sys.stdin)
out = []
for tool in tools:
    spec = {"name": tool["name"], "description": tool["description"]}
    spec["parameters"] = tool["inputSchema"]
    out.append(convert_to_openai_tool(spec, strict=True)["function"])
print(json.dumps(out))
