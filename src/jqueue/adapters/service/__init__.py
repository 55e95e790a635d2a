"""``jqueue serve`` (the ASGI application over the queues of a storage root) and its client.

``wire`` holds what both sides read; ``server`` the native API's routes, queues and broker
tenure; ``queued`` the queued-compatible API over them; ``client`` ``connect`` and
``RemoteQueue``; ``app`` and ``openapi`` put the server's parts together. The client never
imports the server, nor the server the client (``tests/test_layers.py``).
"""
