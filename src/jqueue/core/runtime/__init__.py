"""The worker runtime: ``Worker`` and what it runs handlers with (heartbeats, retries, cron,
typed tasks). It calls queues through ``jqueue.ports``; the commit engine never imports it."""
