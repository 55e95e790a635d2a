"""``S3Storage``: the state as one S3 object, committed with conditional PUTs.

Works with AWS S3 and S3-compatible servers that honour ``If-Match`` and
``If-None-Match`` on PutObject (MinIO, SeaweedFS, moto, R2...).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

from jqueue.adapters.optional import require
from jqueue.adapters.storage.names import checked_name, checked_prefix
from jqueue.domain.errors import CASConflictError, StorageError

aioboto3 = require("aioboto3", extra="s3")
from botocore.config import Config  # noqa: E402  (after the extra check)
from botocore.exceptions import ClientError  # noqa: E402

_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})


_SHARED_SESSIONS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[tuple[str, str], ...], Any]]
_SHARED_SESSIONS = weakref.WeakKeyDictionary()


def shared_session() -> Any:
    """Return the session that storages made without one share, one per event loop and set of
    ``AWS_*`` environment variables: a new session loads the S3 service model on its first
    client, about 0.2 s of CPU with the event loop blocked."""
    environment = tuple(
        sorted((name, value) for name, value in os.environ.items() if name.startswith("AWS_"))
    )
    sessions = _SHARED_SESSIONS.setdefault(asyncio.get_running_loop(), {})
    if (session := sessions.get(environment)) is None:
        session = sessions[environment] = aioboto3.Session()
    return session


RETRIES = {"mode": "standard", "total_max_attempts": 3}
"""botocore's retries unless ``AWS_RETRY_MODE`` or ``AWS_MAX_ATTEMPTS`` says otherwise: what the
AWS SDKs now default to. Its legacy mode tries an endpoint that is down 5 times, over 7 to
10 s, before the caller hears of it; jqueue's own callers retry what is transient anyway."""


def client_config() -> Config | None:
    """The client configuration a storage adds to the environment's: ``RETRIES``, unless the
    environment chooses the retries."""
    if "AWS_RETRY_MODE" in os.environ or "AWS_MAX_ATTEMPTS" in os.environ:
        return None
    return Config(retries=RETRIES)


def _error_code(exc: ClientError) -> tuple[str, int]:
    response: dict[str, Any] = getattr(exc, "response", {}) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


class S3Storage:
    """One S3 object with compare-and-swap writes; the etag is the object's ETag.

    The first write sends ``If-None-Match: *`` so two processes creating the same
    queue cannot both win; later writes send ``If-Match``. Both 412 and 409
    (``ConditionalRequestConflict``) are reported as ``CASConflictError``. While the
    storage is held (an ``async with`` block, or a queue entered with ``async with``)
    one client serves every call, closed when the last holder leaves; a call made
    while nobody holds it opens and closes a client of its own, so that no connection
    outlives its use. Named objects (the log-structured layout) are the keys under
    ``<key>.d/``.

    Parameters
    ----------
    bucket : str
        Bucket name; it must exist.
    key : str
        Object key.
    endpoint_url : str or None
        For S3-compatible servers.
    region_name : str or None
        AWS region.
    session : aioboto3.Session or None
        Session to create the client from (credentials); by default the one the process's
        storages share (``shared_session``).
    """

    def __init__(
        self,
        bucket: str,
        key: str,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        session: Any = None,
    ) -> None:
        self.bucket = bucket
        self.key = key
        self.endpoint_url = endpoint_url
        self.region_name = region_name
        self.session = session
        self.url = f"s3://{bucket}/{key}"
        self.namespace = f"{key}.d/"
        self._opening: asyncio.Task[tuple[Any, Any]] | None = None
        self._holders = 0

    async def __aenter__(self) -> S3Storage:
        self._holders += 1
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._holders -= 1
        if self._holders <= 0:
            self._holders = 0
            await self.aclose()

    async def aclose(self) -> None:
        """Close the client; a later call opens a new one."""
        opening, self._opening = self._opening, None
        if opening is None or opening.get_loop() is not asyncio.get_running_loop():
            return
        try:
            context, _ = await opening
        except Exception:
            return
        await context.__aexit__(None, None, None)

    async def _client(self) -> Any:
        opening = self._opening
        if (
            opening is None
            or opening.get_loop() is not asyncio.get_running_loop()
            or (opening.done() and (opening.cancelled() or opening.exception() is not None))
        ):
            opening = self._opening = asyncio.get_running_loop().create_task(self._open())
        return (await asyncio.shield(opening))[1]

    @contextlib.asynccontextmanager
    async def _connected(self) -> AsyncIterator[Any]:
        """Yield the shared client while the storage is held, else a client for this call only."""
        if self._holders > 0:
            yield await self._client()
            return
        async with self._new_client() as client:
            yield client

    def _new_client(self) -> Any:
        """Return a new client's async context manager (aioboto3)."""
        session = self.session if self.session is not None else shared_session()
        return session.client(
            "s3", endpoint_url=self.endpoint_url, region_name=self.region_name, config=client_config()
        )

    async def _open(self) -> tuple[Any, Any]:
        context = self._new_client()
        return context, await context.__aenter__()

    async def read(self) -> tuple[bytes, str | None]:
        """Return the content and ETag, or ``(b"", None)`` if the object does not exist."""
        found = await self._get(self.key)
        return (b"", None) if found is None else found

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        """Replace the object if its ETag still matches; None creates it only if absent."""
        return await self._put(self.key, content, if_match)

    async def remove(self) -> None:
        """Remove the object if it exists."""
        try:
            async with self._connected() as client:
                await client.delete_object(Bucket=self.bucket, Key=self.key)
        except Exception as exc:
            raise StorageError(f"cannot remove {self.url}", exc) from exc

    async def get(self, name: str) -> bytes | None:
        """Return the named object's content, or None."""
        found = await self._get(self.namespace + checked_name(name))
        return None if found is None else found[0]

    async def create(self, name: str, content: bytes) -> None:
        """Create the named object only if it does not exist (``If-None-Match: *``)."""
        await self._put(self.namespace + checked_name(name), content, None)

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        """Return the names under ``prefix`` after ``start_after``, sorted."""
        arguments = {"Bucket": self.bucket, "Prefix": self.namespace + checked_prefix(prefix)}
        if start_after:
            arguments["StartAfter"] = self.namespace + start_after
        names: list[str] = []
        try:
            async with self._connected() as client:
                async for page in client.get_paginator("list_objects_v2").paginate(**arguments):
                    names.extend(item["Key"][len(self.namespace) :] for item in page.get("Contents", ()))
        except Exception as exc:
            raise StorageError(f"cannot list {self.url}.d/{prefix}", exc) from exc
        return names

    async def delete(self, name: str) -> None:
        """Remove the named object if it exists."""
        key = self.namespace + checked_name(name)
        try:
            async with self._connected() as client:
                await client.delete_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            raise StorageError(f"cannot delete {self.url}.d/{name}", exc) from exc

    async def _get(self, key: str) -> tuple[bytes, str] | None:
        try:
            async with self._connected() as client:
                response = await client.get_object(Bucket=self.bucket, Key=key)
                async with response["Body"] as body:
                    content: bytes = await body.read()
        except ClientError as exc:
            if _error_code(exc)[0] in _MISSING_CODES:
                return None
            raise StorageError(f"cannot read s3://{self.bucket}/{key}", exc) from exc
        except Exception as exc:
            raise StorageError(f"cannot read s3://{self.bucket}/{key}", exc) from exc
        return content, str(response["ETag"])

    async def _put(self, key: str, content: bytes, if_match: str | None) -> str:
        condition = {"IfNoneMatch": "*"} if if_match is None else {"IfMatch": if_match}
        try:
            async with self._connected() as client:
                response = await client.put_object(
                    Bucket=self.bucket, Key=key, Body=content, ContentType="application/json", **condition
                )
        except ClientError as exc:
            code, status = _error_code(exc)
            gone = if_match is not None and code in _MISSING_CODES
            if code in _CONFLICT_CODES or status == 412 or gone:
                raise CASConflictError(f"s3://{self.bucket}/{key}: {code or status} for {condition}") from exc
            raise StorageError(f"cannot write s3://{self.bucket}/{key}", exc) from exc
        except Exception as exc:
            raise StorageError(f"cannot write s3://{self.bucket}/{key}", exc) from exc
        return str(response["ETag"])
