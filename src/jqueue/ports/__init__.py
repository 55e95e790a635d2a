"""Protocols that the core needs from the outside world."""
