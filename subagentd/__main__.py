"""`python -m subagentd` runs the command-line interface."""

from subagentd.cli import main

raise SystemExit(main())
