"""What ``jqueue serve`` and ``jqueue dashboard`` both serve with: the host names they answer
to (``allowed_hosts``, ``host_names``) and the names of the queues under a root
(``queue_names``). Neither the service nor the dashboard is imported here, so each imports
this and the dashboard never imports the service."""
