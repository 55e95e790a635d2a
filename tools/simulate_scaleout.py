"""A model of many brokers on one root: job operations a second, requests a second per prefix,
and dollars per million operations, for 1 to 256 brokers on S3 Standard and S3 Express One Zone.

The model (ADR 0022), with every constant a measured or published figure (``--help`` shows
them, each an option):

- **CPU.** A broker is one process on one core; it spends ``--cpu-ms`` of CPU per operation
  (a push, a claim or an ack: one message of ``tools/benchmark_http.py``, measured 0.028 ms in
  batches of 64). Brokers share the machine's ``--cores`` (8 per machine: 256 brokers are 32
  machines); ``--routing-cost`` is the share lost to forwarding and routing (0: eight members
  on two cores lost nothing against two, docs/benchmarks.md).
- **Commits.** Each broker serves ``--logs-per-broker`` logs (queues, or shards); a busy log
  commits one entry per round, and a round takes a PUT and a GET (``--put-ms``, ``--get-ms``;
  a log's writes go one at a time, ADR 0017), so a log commits at most ``1 / round`` times a
  second however many operations ride in each commit. Checkpoints add ``--checkpoint-writes``
  writes per operation (measured: 7 of 163 writes at 1,000 jobs a second, about 2.3e-4 an op).
- **Reads.** Each round reads the log once more than it writes (the catch-up GET); claims fetch
  payloads from the broker's own cache. Every ``--renew-every`` each member reads the members
  record, the catalog, the broker record and the beats of the ``--watch`` members after it on
  the ring of ids (2, as ``server/members.py`` does; ``--watch 255`` models every member
  watching every other, which puts 65,536 reads a second on the root's prefix at 256 brokers).
- **Limits.** S3 Standard takes 3,500 writes and 5,500 reads a second per partitioned prefix;
  each log is its own prefix (``NAME.json.d/``), the members' objects share the root's. S3
  Express One Zone takes 100,000 writes and 200,000 reads a second per directory bucket by
  default. Prices: S3 Standard $0.005 per 1,000 writes and $0.0004 per 1,000 reads; S3 Express
  One Zone $0.00113 and $0.00003 (the AWS S3 FAQ's example prices, us-east-1).

It prints, per count of brokers, the operations a second and what bounds them (CPU, or the
logs' commit rate), the requests a second of the busiest prefix against its limit, the whole
root's requests a second, and dollars per million operations; then the measured runs it is
checked against (``--measured BROKERS=OPS_PER_S``, from this machine's
``tools/benchmark_http.py``, predicted with ``--machines 1 --cores 2``); it exits 1 when one is
more than 20% off.

Example::

    .venv/bin/python tools/simulate_scaleout.py
    .venv/bin/python tools/simulate_scaleout.py --storage s3-standard --machines 1 --cores 2 \\
        --brokers 1,2,4 --measured 1=34080 --measured 2=66857 --measured 4=63860
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Storage:
    """A storage class: its latencies, its request limits and its prices."""

    name: str
    put_ms: float
    get_ms: float
    writes_per_prefix: float
    reads_per_prefix: float
    per_bucket: bool
    """Whether the limits hold for the whole bucket (S3 Express) rather than per prefix."""
    write_price: float
    read_price: float
    """Dollars per request."""


STORAGES = {
    "s3-standard": Storage("S3 Standard", 100.0, 60.0, 3_500, 5_500, False, 0.005e-3, 0.0004e-3),
    "s3-express": Storage("S3 Express One Zone", 8.0, 5.0, 100_000, 200_000, True, 0.00113e-3, 0.00003e-3),
}
HEADER = "brokers        ops/s  bound          writes/s   reads/s  busiest prefix w/r (limit)    $/M ops"


@dataclass(frozen=True)
class Prediction:
    """What the model says of one root with ``brokers`` brokers on ``storage``."""

    storage: str
    brokers: int
    ops_per_s: float
    bound: str
    writes_per_s: float
    reads_per_s: float
    busiest_prefix_writes: float
    busiest_prefix_reads: float
    prefix_limits: tuple[float, float]
    dollars_per_million_ops: float
    member_reads_per_s: float


def predict(args: argparse.Namespace, storage: Storage, brokers: int) -> Prediction:
    """The model's figures for ``brokers`` brokers (see the module's docstring)."""
    machines = math.ceil(brokers / args.cores) if args.machines is None else args.machines
    cores = min(brokers, machines * args.cores) * args.core_share
    cpu_ops = cores * 1000.0 / args.cpu_ms * (1 - args.routing_cost)
    logs = brokers * args.logs_per_broker
    round_s = (storage.put_ms + storage.get_ms) / 1000.0 + args.round_overhead_ms / 1000.0
    commits_max = logs / round_s
    ops = min(cpu_ops, commits_max * args.ops_per_commit_max)
    bound = "CPU" if ops == cpu_ops else "commits per log"
    commits = min(commits_max, ops / args.ops_per_commit_min)
    watched = min(args.watch, brokers - 1)
    # each member reads the members record, the catalog, the broker record and the beats it watches
    member_reads = brokers * (3 + watched) / args.renew_every
    member_writes = brokers / args.renew_every if brokers > 1 else 0.0
    writes = commits + ops * args.checkpoint_writes + member_writes
    reads = commits * 2 + ops * args.checkpoint_writes + member_reads
    if storage.per_bucket:
        busiest_writes, busiest_reads = writes, reads
    else:
        per_log = commits / logs
        busiest_writes = max(per_log + ops / logs * args.checkpoint_writes, member_writes)
        busiest_reads = max(per_log * 2, member_reads)
    dollars = (writes * storage.write_price + reads * storage.read_price) / ops * 1e6
    return Prediction(
        storage.name, brokers, ops, bound, writes, reads, busiest_writes, busiest_reads,
        (storage.writes_per_prefix, storage.reads_per_prefix), dollars, member_reads,
    )  # fmt: skip


def _row(p: Prediction) -> str:
    """One line of the table: a count of brokers and its figures."""
    w_limit, r_limit = p.prefix_limits
    over = " OVER" if p.busiest_prefix_writes > w_limit or p.busiest_prefix_reads > r_limit else ""
    busiest = f"{p.busiest_prefix_writes:,.0f}/{p.busiest_prefix_reads:,.0f}"
    limits = f"({w_limit:,.0f}/{r_limit:,.0f}{over})"
    head = f"{p.brokers:>7}  {p.ops_per_s:>11,.0f}  {p.bound:<13}"
    requests = f"{p.writes_per_s:>8,.0f}  {p.reads_per_s:>8,.0f}"
    return f"{head}  {requests}  {busiest:>14} {limits:<20}  {p.dollars_per_million_ops:.4f}"


def _bottleneck(args: argparse.Namespace, storage: Storage, counts: list[int]) -> str:
    """Where the model says the next limit is, for the largest count of brokers."""
    p = predict(args, storage, max(counts))
    if p.busiest_prefix_reads > p.prefix_limits[1] or p.busiest_prefix_writes > p.prefix_limits[0]:
        if p.member_reads_per_s >= p.busiest_prefix_reads:
            return (
                f"next limit: the members' reads of each other's beats ({p.member_reads_per_s:,.0f}/s on one "
                f"prefix at {p.brokers} brokers); with --watch 2 (a ring, as built) they are "
                f"{predict(_watching(args, 2), storage, p.brokers).member_reads_per_s:,.0f}/s"
            )
        return f"next limit: a log's requests at {p.brokers} brokers"
    if p.bound != "CPU":
        return "next limit: the logs' commit rate (more logs per broker, or shards)"
    return f"next limit: CPU ({args.cpu_ms} ms an operation); every prefix under its limit"


def _watching(args: argparse.Namespace, watch: int) -> argparse.Namespace:
    changed = argparse.Namespace(**vars(args))
    changed.watch = watch
    return changed


def _measured(pairs: list[str]) -> dict[int, float]:
    found = {}
    for pair in pairs:
        brokers, _, ops = pair.partition("=")
        found[int(brokers)] = float(ops)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--brokers", default="1,2,4,8,16,32,64,128,256")
    parser.add_argument("--storage", default="s3-standard,s3-express")
    parser.add_argument("--cores", type=int, default=8, help="cores per machine")
    parser.add_argument("--machines", type=int, default=None, help="machines (default: a core a broker)")
    parser.add_argument("--core-share", type=float, default=1.0, help="share of a core a broker gets")
    parser.add_argument("--cpu-ms", type=float, default=0.028, help="server CPU per operation (measured)")
    parser.add_argument("--routing-cost", type=float, default=0.0, help="share lost to routing (measured)")
    parser.add_argument("--logs-per-broker", type=int, default=4, help="queues or shards per broker")
    parser.add_argument("--round-overhead-ms", type=float, default=30.0, help="a round's own time")
    parser.add_argument("--ops-per-commit-max", type=float, default=10_000, help="operations one entry takes")
    parser.add_argument("--ops-per-commit-min", type=float, default=1.0)
    parser.add_argument("--checkpoint-writes", type=float, default=2.3e-4, help="writes per operation")
    parser.add_argument("--renew-every", type=float, default=1.0, help="seconds between members' looks")
    parser.add_argument("--watch", type=int, default=2, help="beats each member reads (the code: 2)")
    parser.add_argument("--measured", action="append", default=[], help="BROKERS=OPS_PER_S, to check")
    parser.add_argument("--json", help="also write the predictions here")
    args = parser.parse_args()
    counts = [int(n) for n in args.brokers.split(",")]
    predictions = []
    for key in args.storage.split(","):
        storage = STORAGES[key]
        print(f"{storage.name} (PUT {storage.put_ms:g} ms, GET {storage.get_ms:g} ms)")
        print(HEADER)
        for brokers in counts:
            p = predict(args, storage, brokers)
            predictions.append(p)
            print(_row(p))
        print(_bottleneck(args, storage, counts))
        print()
    worst = 0.0
    for brokers, ops in sorted(_measured(args.measured).items()):
        predicted = predict(args, STORAGES["s3-standard"], brokers).ops_per_s
        off = predicted / ops - 1
        worst = max(worst, abs(off))
        print(f"measured {brokers} brokers: {ops:,.0f} ops/s, predicted {predicted:,.0f} ({100 * off:+.0f}%)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(p) for p in predictions], out, indent=2)
    return 1 if worst > 0.2 else 0


if __name__ == "__main__":
    sys.exit(main())
