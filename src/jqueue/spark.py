"""``jqueue.spark``: the Spark pipeline's entry points (extra ``spark``).

``register(spark)`` adds the ``jqueue`` data source; ``run_workers(...)`` runs workers on
executors. See ``jqueue.adapters.spark``.
"""

from jqueue.adapters.spark import register, run_workers

__all__ = ["register", "run_workers"]
