"""The OpenAPI document of ``jqueue serve`` (``GET /openapi.json``), built from the body types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from jqueue.adapters.service.queued import bodies as queued
from jqueue.adapters.service.wire import bodies as wire
from jqueue.adapters.service.wire import operator_calls


@dataclass(frozen=True)
class Endpoint:
    """One documented call: its method, path, summary and body types (None: no body)."""

    method: str
    path: str
    summary: str
    request: type[object] | None = None
    response: type[object] | None = None


_NATIVE = "/v1/queues/{queue}"
_SETTLE_SUMMARIES = {
    "ack": "Finish jobs.",
    "nack": "Fail jobs (retry or dead letter).",
    "heartbeat": "Extend leases.",
    "release": "Return claimed jobs.",
    "cancel": "Cancel jobs (a running one's worker is asked to stop it).",
}
_QUEUED = "/queue/{queue}"
ENDPOINTS = (
    Endpoint(
        "get",
        "/healthz",
        "This process's role, whether it serves, its owner id, the broker's address and the epoch.",
    ),
    Endpoint("get", "/metrics", "Prometheus metrics of the service and its queues."),
    Endpoint("get", "/openapi.json", "This document."),
    Endpoint("post", f"{_NATIVE}/enqueue", "Add jobs in one commit.", wire.EnqueueRequest, wire.JobsResponse),
    Endpoint(
        "post", f"{_NATIVE}/dequeue", "Claim jobs under a lease.", wire.DequeueRequest, wire.JobsResponse
    ),
    Endpoint(
        "post",
        f"{_NATIVE}/{wire.ACK_AND_DEQUEUE}",
        "Finish jobs and claim the next ones, in one commit.",
        wire.AckAndDequeueRequest,
        wire.AckAndDequeueResponse,
    ),
    Endpoint(
        "post", f"{_NATIVE}/peek", "The jobs a dequeue would claim.", wire.PeekRequest, wire.JobsResponse
    ),
    Endpoint("post", f"{_NATIVE}/changes", "Wait for a change.", wire.ChangesRequest, wire.ChangesResponse),
    *(
        Endpoint("post", f"{_NATIVE}/{verb}", summary, wire.SettleRequest, wire.ResultsResponse)
        for verb, summary in _SETTLE_SUMMARIES.items()
    ),
    Endpoint(
        "post",
        f"{_NATIVE}/result",
        "Wait for a job to finish; how it ended.",
        wire.ResultRequest,
        wire.ResultResponse,
    ),
    Endpoint("get", "/v1/queues", "Every queue of the root.", None, operator_calls.QueueNamesResponse),
    *(
        Endpoint("post", f"{_NATIVE}/{call.verb}", call.summary, call.request, call.response)
        for call in operator_calls.OPERATOR_CALLS
    ),
    Endpoint("get", "/queues", "queued: every queue of the root.", None, queued.QueuesResponse),
    Endpoint("get", "/api-keys", "queued: the API keys and their prefixes.", None, queued.ApiKeysResponse),
    Endpoint("put", "/api-key/{key}", "queued: set an API key's queue prefix.", queued.ApiKeyRequest),
    Endpoint("delete", "/api-key/{key}", "queued: remove an API key."),
    Endpoint("put", _QUEUED, "queued: create a queue."),
    Endpoint("delete", _QUEUED, "queued: delete a queue and its messages."),
    Endpoint("post", f"{_QUEUED}/messages/push", "queued: push.", queued.PushRequest, queued.PushResponse),
    Endpoint("post", f"{_QUEUED}/messages/poll", "queued: poll.", queued.PollRequest, queued.PollResponse),
    Endpoint(
        "post", f"{_QUEUED}/messages/update", "queued: update.", queued.UpdateRequest, queued.UpdateResponse
    ),
    Endpoint("post", f"{_QUEUED}/messages/delete", "queued: delete.", queued.DeleteRequest),
    Endpoint("get", f"{_QUEUED}/suspend", "queued: suspended endpoints.", None, queued.Suspension),
    Endpoint("post", f"{_QUEUED}/suspend", "queued: suspend.", queued.Suspension, queued.Suspension),
    Endpoint("get", f"{_QUEUED}/throttle", "queued: the poll throttle.", None, queued.ThrottleSetting),
    Endpoint(
        "post", f"{_QUEUED}/throttle", "queued: throttle.", queued.ThrottleSetting, queued.ThrottleSetting
    ),
    Endpoint("get", f"{_QUEUED}/metrics", "queued: the queue's counts.", None, queued.QueueMetrics),
)
"""Every route of ``jqueue serve``."""

_MEDIA = ("application/json", "application/msgpack")


def openapi_document(version: str) -> dict[str, Any]:
    """Return the OpenAPI 3.1 document of every endpoint in ``ENDPOINTS``."""
    kinds = [
        kind for endpoint in ENDPOINTS for kind in (endpoint.request, endpoint.response) if kind is not None
    ]
    kinds += [wire.ErrorResponse, queued.QueuedError]
    schemas, components = msgspec.json.schema_components(kinds, ref_template="#/components/schemas/{name}")
    schema_of = dict(zip(kinds, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in ENDPOINTS:
        call: dict[str, Any] = {"summary": endpoint.summary, "responses": _responses(endpoint, schema_of)}
        names = [name for name in ("queue", "key") if f"{{{name}}}" in endpoint.path]
        if names:
            call["parameters"] = [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}} for name in names
            ]
        if endpoint.request is not None:
            content = {media: {"schema": schema_of[endpoint.request]} for media in _MEDIA}
            call["requestBody"] = {"required": True, "content": content}
        paths.setdefault(endpoint.path, {})[endpoint.method] = call
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


def _responses(endpoint: Endpoint, schema_of: dict[type[Any], Any]) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": "Done, and durable."}
    if endpoint.response is not None:
        ok["content"] = {media: {"schema": schema_of[endpoint.response]} for media in _MEDIA}
    native = endpoint.path.startswith(("/v1/", "/healthz", "/metrics", "/openapi"))
    kind = wire.ErrorResponse if native else queued.QueuedError
    error = {
        "description": "Not done: a typed error.",
        "content": {media: {"schema": schema_of[kind]} for media in _MEDIA},
    }
    return {"200": ok, "default": error}
