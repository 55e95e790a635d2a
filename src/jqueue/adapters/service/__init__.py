"""``jqueue serve`` (the ASGI application over the queues of a storage root) and its client."""
