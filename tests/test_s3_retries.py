"""An S3 endpoint that fails costs a caller three attempts (botocore's standard retries), not the
five of its legacy mode (7 to 10 s when the endpoint is down), unless the environment chooses
the retries."""

from __future__ import annotations

import asyncio
import socket

import pytest

from jqueue import StorageError
from jqueue.adapters.storage.s3 import S3Storage


async def _attempts_on_a_dead_endpoint() -> int:
    """Read a queue from an endpoint that answers every request 503 (SlowDown); return how many
    requests the read made before it failed."""
    attempts = 0

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal attempts
        while await reader.readline() not in (b"\r\n", b""):
            pass  # the request's head; a GET has no body
        attempts += 1
        writer.write(b"HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.0.1", 0, family=socket.AF_INET)
    port = server.sockets[0].getsockname()[1]
    async with server:
        endpoint = f"http://127.0.0.1:{port}"
        storage = S3Storage("bucket", "q.json", endpoint_url=endpoint, region_name="us-east-1")
        with pytest.raises(StorageError):
            await storage.read()
    return attempts


async def test_a_dead_endpoint_is_tried_three_times(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.delenv("AWS_RETRY_MODE", raising=False)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    assert await _attempts_on_a_dead_endpoint() == 3


async def test_the_environment_chooses_the_retries_when_it_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    assert await _attempts_on_a_dead_endpoint() == 2
