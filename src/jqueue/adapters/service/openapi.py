"""The OpenAPI document of ``jqueue serve`` (``GET /openapi.json``), built from the body types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from jqueue.adapters.service import operator_wire, wire
from jqueue.adapters.service import queued_wire as queued


@dataclass(frozen=True)
class Operation:
    """One documented call: its method, path, summary and body types (None: no body)."""

    method: str
    path: str
    summary: str
    request: type[Any] | None = None
    response: type[Any] | None = None


_NATIVE = "/v1/queues/{queue}"
_QUEUED = "/queue/{queue}"
OPERATIONS = (
    Operation("get", "/healthz", "This process's role, the broker's address and the epoch."),
    Operation("get", "/metrics", "Prometheus metrics of the service and its queues."),
    Operation("get", "/openapi.json", "This document."),
    Operation(
        "post", f"{_NATIVE}/enqueue", "Add jobs in one commit.", wire.EnqueueRequest, wire.JobsResponse
    ),
    Operation(
        "post", f"{_NATIVE}/dequeue", "Claim jobs under a lease.", wire.DequeueRequest, wire.JobsResponse
    ),
    Operation(
        "post", f"{_NATIVE}/peek", "The jobs a dequeue would claim.", wire.PeekRequest, wire.JobsResponse
    ),
    Operation("post", f"{_NATIVE}/changes", "Wait for a change.", wire.ChangesRequest, wire.ChangesResponse),
    Operation("post", f"{_NATIVE}/ack", "Finish jobs.", wire.SettleRequest, wire.ResultsResponse),
    Operation(
        "post",
        f"{_NATIVE}/nack",
        "Fail jobs (retry or dead letter).",
        wire.SettleRequest,
        wire.ResultsResponse,
    ),
    Operation("post", f"{_NATIVE}/heartbeat", "Extend leases.", wire.SettleRequest, wire.ResultsResponse),
    Operation("post", f"{_NATIVE}/release", "Return claimed jobs.", wire.SettleRequest, wire.ResultsResponse),
    Operation(
        "post",
        f"{_NATIVE}/cancel",
        "Cancel jobs (a running one's worker is asked to stop it).",
        wire.SettleRequest,
        wire.ResultsResponse,
    ),
    Operation(
        "post",
        f"{_NATIVE}/result",
        "Wait for a job to finish; how it ended.",
        wire.ResultRequest,
        wire.ResultResponse,
    ),
    Operation("get", "/v1/queues", "Every queue of the root.", None, operator_wire.QueueNamesResponse),
    *(
        Operation("post", f"{_NATIVE}/{call.verb}", call.summary, call.request, call.response)
        for call in operator_wire.OPERATOR_CALLS
    ),
    Operation("get", "/queues", "queued: every queue of the root.", None, queued.QueuesResponse),
    Operation("get", "/api-keys", "queued: the API keys and their prefixes.", None, queued.ApiKeysResponse),
    Operation("put", "/api-key/{key}", "queued: set an API key's queue prefix.", queued.ApiKeyRequest),
    Operation("delete", "/api-key/{key}", "queued: remove an API key."),
    Operation("put", _QUEUED, "queued: create a queue."),
    Operation("delete", _QUEUED, "queued: delete a queue and its messages."),
    Operation("post", f"{_QUEUED}/messages/push", "queued: push.", queued.PushRequest, queued.PushResponse),
    Operation("post", f"{_QUEUED}/messages/poll", "queued: poll.", queued.PollRequest, queued.PollResponse),
    Operation(
        "post", f"{_QUEUED}/messages/update", "queued: update.", queued.UpdateRequest, queued.UpdateResponse
    ),
    Operation("post", f"{_QUEUED}/messages/delete", "queued: delete.", queued.DeleteRequest),
    Operation("get", f"{_QUEUED}/suspend", "queued: suspended endpoints.", None, queued.Suspension),
    Operation("post", f"{_QUEUED}/suspend", "queued: suspend.", queued.Suspension, queued.Suspension),
    Operation("get", f"{_QUEUED}/throttle", "queued: the poll throttle.", None, queued.ThrottleSetting),
    Operation(
        "post", f"{_QUEUED}/throttle", "queued: throttle.", queued.ThrottleSetting, queued.ThrottleSetting
    ),
    Operation("get", f"{_QUEUED}/metrics", "queued: the queue's counts.", None, queued.QueueMetrics),
)
"""Every route of ``jqueue serve``."""

_MEDIA = ("application/json", "application/msgpack")


def openapi_document(version: str) -> dict[str, Any]:
    """Return the OpenAPI 3.1 document of every operation in ``OPERATIONS``."""
    kinds = [kind for op in OPERATIONS for kind in (op.request, op.response) if kind is not None]
    kinds += [wire.ErrorResponse, queued.QueuedError]
    schemas, components = msgspec.json.schema_components(kinds, ref_template="#/components/schemas/{name}")
    schema_of = dict(zip(kinds, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        call: dict[str, Any] = {"summary": op.summary, "responses": _responses(op, schema_of)}
        names = [name for name in ("queue", "key") if f"{{{name}}}" in op.path]
        if names:
            call["parameters"] = [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}} for name in names
            ]
        if op.request is not None:
            content = {media: {"schema": schema_of[op.request]} for media in _MEDIA}
            call["requestBody"] = {"required": True, "content": content}
        paths.setdefault(op.path, {})[op.method] = call
    security: list[dict[str, list[str]]] = [{"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "jqueue serve", "version": version},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": security,
    }


def _responses(op: Operation, schema_of: dict[type[Any], Any]) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": "Done, and durable."}
    if op.response is not None:
        ok["content"] = {media: {"schema": schema_of[op.response]} for media in _MEDIA}
    native = op.path.startswith(("/v1/", "/healthz", "/metrics", "/openapi"))
    kind = wire.ErrorResponse if native else queued.QueuedError
    error = {
        "description": "Not done: a typed error.",
        "content": {media: {"schema": schema_of[kind]} for media in _MEDIA},
    }
    return {"200": ok, "default": error}
