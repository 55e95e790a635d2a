"""``ServedQueues``: the dashboard's view of the queues a ``jqueue serve`` process serves."""

from __future__ import annotations

from jqueue.adapters.dashboard.source import BrokerView, NotServingError, ShownQueue, Sighting
from jqueue.adapters.service.server.endpoints import HTTPError, Service
from jqueue.adapters.web.queue_names import queue_of, shard_name
from jqueue.core.sharded import ShardedQueue


class ServedQueues:
    """The queues of ``service``'s root, shown only while this process is their broker."""

    def __init__(self, service: Service) -> None:
        self.service = service

    async def _serving(self) -> None:
        try:
            await self.service.check_serving()
        except HTTPError as exc:
            raise NotServingError(exc.broker) from exc

    async def names(self) -> list[str]:
        """The queues of the root (see ``QueueHost.found``), a sharded queue once."""
        await self._serving()
        return sorted({queue_of(name) for name in self.service.host.found()})

    async def get(self, name: str) -> ShownQueue:
        """The open queue ``name``, its shards added up if it has several."""
        await self._serving()
        host = self.service.host
        first = await host.get(name)
        count = await first.shards()
        if count == 1:
            return first
        return ShardedQueue.over([first, *[await host.get(shard_name(name, k)) for k in range(1, count)]])

    def broker(self) -> BrokerView | None:
        """This process, as the broker (or as it last saw the record)."""
        tenure = self.service.tenure
        record = tenure.record
        return BrokerView(record.address if record else tenure.address, tenure.epoch, tenure.since)

    def workers(self, name: str) -> list[Sighting] | None:
        """The workers that called ``name`` through this broker lately."""
        return self.service.sightings.of(name)

    def all_workers(self) -> list[Sighting] | None:
        """The workers that called any queue through this broker lately."""
        return self.service.sightings.everyone()
