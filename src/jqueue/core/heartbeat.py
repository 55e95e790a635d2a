"""``HeartbeatManager`` at its documented path (it lives with the worker runtime)."""

from __future__ import annotations

from jqueue.core.runtime.heartbeat import HeartbeatManager

__all__ = ["HeartbeatManager"]
