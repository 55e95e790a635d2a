"""The server of ``jqueue serve``: the routes of the native API, the queues of a root, the broker
tenure, the metrics and the dashboard's view. It imports ``wire``, never ``client``."""
