"""The rules of subagentd: live registry, inbox scheduling, lineage authorization, tools. No I/O."""
