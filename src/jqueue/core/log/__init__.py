"""The log-structured layout: its store, payload references, migration and compaction."""
