"""Host names as a ``Host`` header or ``--listen`` gives them: what the CLI checks before the
``serve`` extra is imported, and what ``allowed_hosts`` compares."""

from __future__ import annotations

import ipaddress


def host_name(value: str) -> str:
    """The name in a ``Host`` value (or ``HOST:PORT``, or a bare IPv6 address): without the
    port, the brackets of an IPv6 address and a trailing dot, in lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is the loopback interface."""
    name = host_name(host)
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
