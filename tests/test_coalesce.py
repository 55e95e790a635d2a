"""The client's coalescing: calls made while a request is in flight share the next request."""

from __future__ import annotations

import asyncio

import pytest

from jqueue.adapters.service.client.remote_queue import SLOW_REQUEST, Coalescer


async def test_calls_of_one_turn_share_a_request_and_later_ones_the_next() -> None:
    sent: list[tuple[str, list[int]]] = []
    release = asyncio.Event()

    async def send(key: str, items: list[int]) -> list[int | BaseException]:
        sent.append((key, items))
        await release.wait()
        return [ValueError(item) if item < 0 else item * 10 for item in items]

    coalescer: Coalescer[str, int, int] = Coalescer(send)
    first = [asyncio.create_task(coalescer.call("ack", n)) for n in range(5)]
    other_key = asyncio.create_task(coalescer.call("nack", 7))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    later = [asyncio.create_task(coalescer.call("ack", n)) for n in (5, -1)]  # while "ack" is in flight
    await asyncio.sleep(0)
    assert sent == [("ack", [0, 1, 2, 3, 4]), ("nack", [7])]
    release.set()
    assert await asyncio.gather(*first, other_key) == [0, 10, 20, 30, 40, 70]
    assert await later[0] == 50
    with pytest.raises(ValueError, match="-1"):
        await later[1]
    assert sent[2:] == [("ack", [5, -1])]


async def test_a_failed_request_fails_every_call_in_it_and_a_cancelled_caller_is_skipped() -> None:
    async def send(key: str, items: list[int]) -> list[int | BaseException]:
        await asyncio.sleep(0.01)
        raise ConnectionError("the service is gone")

    coalescer: Coalescer[str, int, int] = Coalescer(send)
    calls = [asyncio.create_task(coalescer.call("ack", n)) for n in range(3)]
    await asyncio.sleep(0)
    calls[1].cancel()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[0], ConnectionError)
    assert isinstance(results[1], asyncio.CancelledError)
    assert isinstance(results[2], ConnectionError)
    assert await asyncio.wait_for(Coalescer(_echo).call("k", 3), 5) == 3  # a fresh key is sent again


async def _echo(key: str, items: list[int]) -> list[int | BaseException]:
    return list(items)


async def test_after_a_slow_request_the_next_calls_do_not_wait_for_one_in_flight() -> None:
    started: list[tuple[list[int], float]] = []

    async def send(key: str, items: list[int]) -> list[int | BaseException]:
        started.append((items, asyncio.get_running_loop().time()))
        await asyncio.sleep(SLOW_REQUEST * 2)
        return list(items)

    coalescer: Coalescer[str, int, int] = Coalescer(send, max_in_flight=2)
    assert await coalescer.call("ack", 0) == 0  # slow: the key now sends up to two at once
    first = asyncio.create_task(coalescer.call("ack", 1))
    await asyncio.sleep(0.001)
    second = asyncio.create_task(coalescer.call("ack", 2))
    await asyncio.sleep(0.001)
    third = asyncio.create_task(coalescer.call("ack", 3))  # two in flight: waits for the next
    assert list(await asyncio.gather(first, second, third)) == [1, 2, 3]
    assert [items for items, _ in started] == [[0], [1], [2], [3]]
    assert started[2][1] - started[1][1] < SLOW_REQUEST, "the second went while the first was in flight"
    assert started[3][1] - started[1][1] >= SLOW_REQUEST * 2 * 0.9, "the third waited for a free slot"
