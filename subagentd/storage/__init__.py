"""SQLite persistence: one connection with group commit, an object per table, sqlite-utils migrations."""
