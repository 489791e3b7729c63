"""Unit tests: one part at a time, in this process, on the in-memory transport
(and SQLite files); no server, no other process."""
