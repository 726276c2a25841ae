"""SQLite persistence through sqlite-utils: migrations, sessions, descriptors, events, inboxes, keys."""
