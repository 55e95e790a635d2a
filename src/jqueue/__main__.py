"""``python -m jqueue``: run the demonstration on a local file queue."""

from jqueue.adapters.demo import main

main()
