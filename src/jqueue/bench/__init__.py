"""Benchmark jqueue's queues against a storage: ``jqueue bench --storage URL``.

Every combination of queue and scenario runs ``--ops`` calls against a fresh queue
object beside the URL and records the latency of each call. Afterwards the
benchmark reads the queue state back and checks that the calls really happened
(the ``verified`` field). The results go to stdout as a table and, with
``--json PATH``, to a JSON file with run metadata. ``--get-latency-ms`` /
``--put-latency-ms`` add a fixed sleep before every storage read / write, to
imitate a remote object store. The exit status is 0 when every row verified, 1
when some did not, and 2 for bad arguments.

Scenarios
---------
enqueue-seq
    One caller enqueues ``--ops`` jobs one after another.
enqueue-c10, enqueue-c50
    The ``--ops`` enqueues are split over 10 / 50 concurrent callers.
dequeue-seq
    The queue is filled with ``--ops`` jobs first (untimed, through a
    ``BrokerQueue`` fed by concurrent enqueues); then one caller dequeues one
    job per call until it has claimed them all.
mixed-c50
    50 concurrent callers each loop enqueue -> dequeue -> ack (of what the
    dequeue returned); every call counts as one op, ``--ops`` calls in total.

Modules: ``settings`` (what a run does), ``scenarios`` (the calls), ``verify`` (the
check), ``report`` (rows, table, JSON) and ``runner`` (backends and ``run``).
It needs nothing beyond the core (and the extra of the storage it runs against);
``tools/benchmark_storage.py`` runs it on memory, file and S3 (moto's server).

Examples
--------
::

    jqueue bench --storage file:///tmp/bench/queue.json --ops 200 --scenarios mixed-c50
"""

from jqueue.bench.runner import run
from jqueue.bench.settings import Settings

__all__ = ["Settings", "run"]
