"""The client of ``jqueue serve``: ``connect`` and ``RemoteQueue`` (``remote_queue``), its HTTP
calls and failover (``caller``) and its operator calls (``remote_operator``). It imports
``wire``, never ``server``."""
