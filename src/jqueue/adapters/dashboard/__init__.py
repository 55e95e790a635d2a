"""The web dashboard of ``jqueue serve`` and ``jqueue dashboard`` (needs the ``serve`` extra)."""
