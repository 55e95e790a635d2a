"""The queued-compatible API of ``jqueue serve``: queued's routes, bodies and errors over the
server's queues. It imports ``server`` and ``wire``."""
