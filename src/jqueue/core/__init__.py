"""Queues, group commit and heartbeats, written against the ports."""
