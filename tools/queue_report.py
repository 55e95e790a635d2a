"""Report on a queue's history with Spark: see ``jqueue.adapters.spark.report``.

.venv/bin/python tools/queue_report.py file:///path/queue.json --out queue-report
"""

import sys

from jqueue.adapters.spark.report import main

if __name__ == "__main__":
    sys.exit(main())
