"""The commit loop both layouts share (``CommitStore``; the single object's ``SingleObjectStore``)
and what it stands on: retries, time limits on storage calls, settings, commit counts. It
imports nothing of the engine above it (``log/``, the queue)."""
