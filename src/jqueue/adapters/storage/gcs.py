"""``GCSStorage``: the state as one Google Cloud Storage object, committed with generation preconditions."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from jqueue.adapters.optional import require
from jqueue.adapters.storage.names import checked_name, checked_prefix
from jqueue.domain.errors import CASConflictError, StorageError

require("google.cloud.storage", extra="gcs")
import requests  # noqa: E402  (after the extra check)
from google.api_core import exceptions as gexc  # noqa: E402
from google.cloud import storage as gcs  # noqa: E402

T = TypeVar("T")

_TRANSIENT: tuple[type[Exception], ...] = (
    gexc.TooManyRequests,
    gexc.InternalServerError,
    gexc.BadGateway,
    gexc.ServiceUnavailable,
    gexc.GatewayTimeout,
    requests.ConnectionError,
    requests.Timeout,
)


class GCSStorage:
    """One GCS object with compare-and-swap writes; the etag is the object's generation.

    The first write uses ``ifGenerationMatch=0`` (create only), later ones the
    generation last read. Rate limiting (429) and 5xx answers are retried here
    with jittered exponential back-off. The synchronous client runs in a thread so
    the event loop never blocks. Named objects (the log-structured layout) are the
    objects under ``<blob_name>.d/``.

    Parameters
    ----------
    bucket_name : str
        Bucket name; it must exist.
    blob_name : str
        Object name.
    client : google.cloud.storage.Client or None
        Client to use; a default one (application default credentials) otherwise.
    max_attempts : int
        Tries per request when the service answers 429 or 5xx.
    """

    def __init__(
        self, bucket_name: str, blob_name: str, client: Any = None, *, max_attempts: int = 6
    ) -> None:
        self.bucket_name = bucket_name
        self.blob_name = blob_name
        self.url = f"gs://{bucket_name}/{blob_name}"
        self.namespace = f"{blob_name}.d/"
        self.max_attempts = max_attempts
        self._client = client

    async def read(self) -> tuple[bytes, str | None]:
        """Return the content and generation, or ``(b"", None)`` if the object does not exist."""
        return await asyncio.to_thread(self._retrying, "read", self._read)

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        """Replace the object if its generation still matches; None creates it only if absent."""
        return await asyncio.to_thread(self._retrying, "write", lambda: self._write(content, if_match))

    async def remove(self) -> None:
        """Remove the object if it exists."""

        def remove() -> None:
            with contextlib.suppress(gexc.NotFound):
                self._gcs().bucket(self.bucket_name).blob(self.blob_name).delete(retry=None)

        await asyncio.to_thread(self._retrying, "delete", remove)

    async def get(self, name: str) -> bytes | None:
        """Return the named object's content, or None."""
        blob_name = self.namespace + checked_name(name)
        found = await asyncio.to_thread(self._retrying, "read", lambda: self._read_blob(blob_name))
        return None if found is None else found[0]

    async def create(self, name: str, content: bytes) -> None:
        """Create the named object only if it does not exist (generation 0)."""
        blob_name = self.namespace + checked_name(name)
        await asyncio.to_thread(self._retrying, "create", lambda: self._write_blob(blob_name, content, 0))

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        """Return the names under ``prefix`` after ``start_after``, sorted."""
        full_prefix = self.namespace + checked_prefix(prefix)
        start = self.namespace + start_after if start_after else None

        def names() -> list[str]:
            client = self._gcs()
            blobs = client.list_blobs(self.bucket_name, prefix=full_prefix, start_offset=start, retry=None)
            return [blob.name[len(self.namespace) :] for blob in blobs]

        found = await asyncio.to_thread(self._retrying, "list", names)
        return [name for name in found if name > start_after]

    async def delete(self, name: str) -> None:
        """Remove the named object if it exists."""
        blob_name = self.namespace + checked_name(name)

        def delete() -> None:
            with contextlib.suppress(gexc.NotFound):
                self._gcs().bucket(self.bucket_name).blob(blob_name).delete(retry=None)

        await asyncio.to_thread(self._retrying, "delete", delete)

    def _gcs(self) -> Any:
        if self._client is None:
            self._client = gcs.Client()
        return self._client

    def _read(self) -> tuple[bytes, str | None]:
        found = self._read_blob(self.blob_name)
        return (b"", None) if found is None else found

    def _write(self, content: bytes, if_match: str | None) -> str:
        try:
            generation = 0 if if_match is None else int(if_match)
        except ValueError as exc:
            raise CASConflictError(f"{self.url}: {if_match!r} is not a GCS generation") from exc
        return self._write_blob(self.blob_name, content, generation)

    def _read_blob(self, blob_name: str) -> tuple[bytes, str] | None:
        blob = self._gcs().bucket(self.bucket_name).blob(blob_name)
        try:
            content: bytes = blob.download_as_bytes(retry=None)
        except gexc.NotFound:
            return None
        return content, str(blob.generation)

    def _write_blob(self, blob_name: str, content: bytes, generation: int) -> str:
        blob = self._gcs().bucket(self.bucket_name).blob(blob_name)
        try:
            blob.upload_from_string(
                content, content_type="application/json", if_generation_match=generation, retry=None
            )
        except gexc.PreconditionFailed as exc:
            where = f"gs://{self.bucket_name}/{blob_name}"
            raise CASConflictError(f"{where}: generation is no longer {generation}") from exc
        return str(blob.generation)

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        for attempt in range(1, self.max_attempts + 1):
            try:
                return call()
            except CASConflictError:
                raise
            except _TRANSIENT as exc:
                if attempt == self.max_attempts:
                    raise StorageError(f"cannot {what} {self.url} after {attempt} attempts", exc) from exc
                time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))
            except Exception as exc:
                raise StorageError(f"cannot {what} {self.url}", exc) from exc
        raise AssertionError("unreachable")
