"""Fault handling of the cloud adapters, injected in front of real servers."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from google.api_core.exceptions import ServiceUnavailable, TooManyRequests

from conftest import BUCKET, s3_env, s3_session
from jqueue import CASConflictError, DirectQueue, GCSStorage, S3Storage, StorageError
from jqueue.adapters.storage.s3 import shared_session
from servers import GCSEndpoint, S3Endpoint


class S3Proxy:
    """Forwards to a real aiobotocore client; ``put_failures`` are raised first."""

    def __init__(self, real: Any, put_failures: list[Exception]) -> None:
        self.real = real
        self.put_failures = put_failures

    async def put_object(self, **kwargs: Any) -> Any:
        if self.put_failures:
            raise self.put_failures.pop(0)
        return await self.real.put_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class S3SessionProxy:
    """Counts the clients a real session opens and closes; wraps them in ``S3Proxy``."""

    def __init__(self, real: Any, put_failures: list[Exception] | None = None) -> None:
        self.real = real
        self.put_failures = put_failures or []
        self.opened = 0
        self.closed = 0

    def client(self, *args: Any, **kwargs: Any) -> Any:
        session = self
        context = self.real.client(*args, **kwargs)

        class Context:
            async def __aenter__(self) -> S3Proxy:
                session.opened += 1
                return S3Proxy(await context.__aenter__(), session.put_failures)

            async def __aexit__(self, *exc: object) -> None:
                session.closed += 1
                await context.__aexit__(*exc)

        return Context()


def conflict_409() -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "ConditionalRequestConflict", "Message": "retry"},
            "ResponseMetadata": {"HTTPStatusCode": 409},
        },
        "PutObject",
    )


def s3_storage(moto: S3Endpoint, key: str, session: Any) -> S3Storage:
    return S3Storage(BUCKET, key, endpoint_url=moto.url, region_name=moto.region, session=session)


async def test_s3_409_is_a_cas_conflict_and_is_retried(moto: S3Endpoint) -> None:
    session = S3SessionProxy(s3_session(moto), put_failures=[conflict_409()])
    storage = s3_storage(moto, "faults/409.json", session)
    with pytest.raises(CASConflictError):
        await storage.write(b"x")
    session.put_failures.extend([conflict_409(), conflict_409()])
    async with DirectQueue(storage) as q:
        job = await q.enqueue("work", b"x")
        assert [j.id for j in (await q.read_state()).jobs] == [job.id]


async def test_s3_other_errors_are_storage_errors(moto: S3Endpoint) -> None:
    storage = S3Storage("no-such-bucket", "q.json", endpoint_url=moto.url, session=s3_session(moto))
    with pytest.raises(StorageError) as raised:
        await storage.write(b"x")
    assert isinstance(raised.value.cause, ClientError)
    await storage.aclose()


async def test_s3_opens_one_client_per_storage_and_closes_it(moto: S3Endpoint) -> None:
    session = S3SessionProxy(s3_session(moto))
    storage = s3_storage(moto, "faults/one-client.json", session)
    async with DirectQueue(storage) as q:
        for i in range(10):
            job = await q.enqueue("work", str(i).encode())
            await q.dequeue()
            await q.ack(job.id)
        assert (session.opened, session.closed) == (1, 0)
    assert (session.opened, session.closed) == (1, 1)


async def test_s3_storages_without_a_session_share_one_per_set_of_credentials(
    moto: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = s3_env(moto)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, env[name])
    shared = shared_session()
    opened: list[str] = []
    real_client = shared.client

    def counted_client(*args: Any, **kwargs: Any) -> Any:
        opened.append("client")
        return real_client(*args, **kwargs)

    monkeypatch.setattr(shared, "client", counted_client)
    for n in range(3):  # one model load for all, not one per storage
        storage = S3Storage(BUCKET, f"faults/shared-{n}.json", endpoint_url=moto.url, region_name=moto.region)
        await storage.write(f"{n}".encode())
        assert (await storage.read())[0] == f"{n}".encode()
    assert opened == ["client"] * 6
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "someone-else")
    assert shared_session() is not shared  # other credentials: a session of their own
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", env["AWS_ACCESS_KEY_ID"])
    assert shared_session() is shared


class GCSProxy:
    """Forwards to a real google-cloud-storage object, raising ``failures`` first on I/O calls."""

    def __init__(self, real: Any, failures: list[Exception]) -> None:
        self.real = real
        self.failures = failures

    def bucket(self, name: str) -> GCSProxy:
        return GCSProxy(self.real.bucket(name), self.failures)

    def blob(self, name: str) -> GCSProxy:
        return GCSProxy(self.real.blob(name), self.failures)

    def _failing(self, method: str) -> Any:
        real = getattr(self.real, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.failures:
                raise self.failures.pop(0)
            return real(*args, **kwargs)

        return call

    def __getattr__(self, name: str) -> Any:
        if name in ("download_as_bytes", "upload_from_string"):
            return self._failing(name)
        return getattr(self.real, name)


async def test_gcs_rate_limits_are_retried_with_backoff(fake_gcs: GCSEndpoint) -> None:
    failures: list[Exception] = [TooManyRequests("slow down"), ServiceUnavailable("busy")]
    storage = GCSStorage(BUCKET, "faults/429.json", client=GCSProxy(fake_gcs.client(), failures))
    etag = await storage.write(b"x")
    failures.append(TooManyRequests("slow down"))
    assert await storage.read() == (b"x", etag)
    assert failures == []


async def test_gcs_gives_up_after_its_attempts(fake_gcs: GCSEndpoint) -> None:
    failures: list[Exception] = [TooManyRequests("slow down") for _ in range(3)]
    storage = GCSStorage(
        BUCKET, "faults/give-up.json", client=GCSProxy(fake_gcs.client(), failures), max_attempts=3
    )
    with pytest.raises(StorageError) as raised:
        await storage.write(b"x")
    assert isinstance(raised.value.cause, TooManyRequests)
