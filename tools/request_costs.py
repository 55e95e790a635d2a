"""What storage requests cost, at list prices, for the benchmarks that count them.

A request is priced by its class. S3 Standard: PUT, POST, COPY and LIST are class A, GET and
HEAD class B, DELETE free. Google Cloud Storage (Standard, a region) prices its class A
(writes, lists) and class B (reads) operations the same per request, and deletes are free.
SQS, for comparison, charges each request alike, and a job needs at least three: send,
receive, delete.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

REQUEST_CLASSES = ("class_a", "class_b", "free")


@dataclass(frozen=True)
class PriceList:
    """Dollars per request of each class."""

    name: str
    class_a: float
    class_b: float

    def dollars(self, requests: Mapping[str, int]) -> float:
        """The cost of ``requests`` (counts by request class)."""
        return requests.get("class_a", 0) * self.class_a + requests.get("class_b", 0) * self.class_b


PRICE_LISTS = (
    PriceList("S3 Standard", class_a=0.005 / 1000, class_b=0.0004 / 1000),
    PriceList("GCS Standard", class_a=0.005 / 1000, class_b=0.0004 / 1000),
)
SQS_DOLLARS_PER_REQUEST = 0.40 / 1_000_000
SQS_REQUESTS_PER_JOB = 3


def request_class(method: str, path: str, query: str) -> str:
    """The price class of an S3 request (path-style addressing: ``/BUCKET[/KEY]``)."""
    if method == "DELETE":
        return "free"
    if method in ("GET", "HEAD"):
        is_list = path.strip("/").count("/") == 0 or "list-type" in query
        return "class_a" if method == "GET" and is_list else "class_b"
    return "class_a"


def cost_per_million_jobs(requests: Mapping[str, int], jobs: int) -> dict[str, float]:
    """Dollars per million jobs at each price list, and SQS's at its minimum requests per job."""
    costs = {price.name: price.dollars(requests) * 1_000_000 / max(jobs, 1) for price in PRICE_LISTS}
    costs["SQS"] = SQS_DOLLARS_PER_REQUEST * SQS_REQUESTS_PER_JOB * 1_000_000
    return {name: round(dollars, 4) for name, dollars in costs.items()}
