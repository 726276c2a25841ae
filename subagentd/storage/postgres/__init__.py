"""The PostgreSQL backend (`--db postgresql://...`): one package, the same Store as SQLite."""
