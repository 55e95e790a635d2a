"""Pure models and state transitions; no I/O."""
