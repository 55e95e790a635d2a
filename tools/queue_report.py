"""Report on a queue's history: see ``jqueue.adapters.report`` (``jqueue report`` runs the same).

.venv/bin/python tools/queue_report.py file:///path/queue.json --out queue-report [--engine spark]
"""

import sys

from jqueue.adapters.report import main

if __name__ == "__main__":
    sys.exit(main())
