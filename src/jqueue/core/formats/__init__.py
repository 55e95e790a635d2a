"""How a queue becomes bytes: the single object, the log entry, the checkpoint, and their shared parts."""
