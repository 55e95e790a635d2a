"""``ServedQueues``: the dashboard's view of the queues a ``jqueue serve`` process serves."""

from __future__ import annotations

from jqueue.adapters.dashboard.source import BrokerView, NotServingError, Sighting
from jqueue.adapters.service.server.endpoints import HTTPError, Service
from jqueue.core.broker import BrokerQueue


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
        """The queues of the root (see ``QueueHost.found``)."""
        await self._serving()
        return self.service.host.found()

    async def get(self, name: str) -> BrokerQueue:
        """The open queue ``name``."""
        await self._serving()
        return await self.service.host.get(name)

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
