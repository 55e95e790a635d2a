"""Fuzz jqueue's state decoders and tally every error that is not a ``CorruptStateError``.

Each decoder (single-object state, log entry, checkpoint, slab, marker) gets random bytes and
mutations of valid encodings; what decodes is then used as a queue uses it (jobs, history,
throttles, stats, claims, acks, nacks, sweeps, purges, re-encoding and decoding again).
Failures are grouped by exception type and the line of ``src/jqueue`` that raised it, each
with the smallest example found (shrunk greedily). Exits 1 if any is found::

    .venv/bin/python tools/fuzz_decoders.py --inputs 25000 --seed 1
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import json
import random
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import takewhile
from pathlib import Path
from typing import Any, NamedTuple

import jqueue
from jqueue.core.formats import checkpoint as checkpoint_format
from jqueue.core.formats import entry as entry_format
from jqueue.core.formats import payload_refs, slab_block, slab_whole
from jqueue.core.formats import single as single_format
from jqueue.core.formats import slab as slab_format
from jqueue.core.log.slab_load import loaded
from jqueue.core.log.slab_plan import Plan
from jqueue.core.log.slab_plan import plan as make_plan
from jqueue.core.log.slabs import SlabSet
from jqueue.domain import effects as fx
from jqueue.domain.controls import Controls
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import JobStatus
from jqueue.domain.schema import Payload, job_from
from jqueue.domain.stats import stats_of
from jqueue.domain.times import to_micros

SRC = Path(jqueue.__file__).resolve().parent
S = 1_000_000
T0 = to_micros(datetime(2026, 1, 1, tzinfo=UTC))
NOW = T0 + 600 * S
SEQ = 5
Path_ = tuple[str | int, ...]
Failure = tuple[str, str]  # (exception type, file:line in src/jqueue that raised it)
SENTINELS = {"\x7fLONE\x7f": b"\\ud800", "\x7fBAD\x7f": b"\xff", "\x7fCUT\x7f": b"\xe2\x82"}  # after dumps
INTS = [0, -1, 1, 2**24 - 1, 2**24, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 2**70, -(2**63), -(2**63) - 1,
        -(2**70), 10**30, 10**400, 253_402_300_800 * S, -62_135_596_800 * S - 1]  # fmt: skip
FLOATS = [0.5, -0.0, 1.0, 1e20, 1e308, float("inf"), float("nan")]
STRINGS = ["", "\ud800", "\udfff", *SENTINELS, *JobStatus, "bogus", "add", "claim", "requeue", "remove",
           "beat", "die", "publish", "discard", "forget", "pause", "throttle", entry_format.LAYOUT,
           "jqueue-log/2", "job-1", "job-2", "email", "k0", "b1", "0001-01-01T00:00:00+01:00",
           "9999-12-31T23:59:59.999999-01:00", "2026-01-01T00:00:00", "AAAA", "\x00", "é"]  # fmt: skip


def _surrogates(exc: UnicodeError) -> tuple[bytes, int]:
    assert isinstance(exc, UnicodeEncodeError)
    out = [bytes([ord(c) - 0xDC00]) if 0xDC80 <= ord(c) <= 0xDCFF else c.encode("utf-8", "surrogatepass")
           for c in exc.object[exc.start : exc.end]]  # fmt: skip
    return b"".join(out), exc.end


codecs.register_error("jqueue-fuzz", _surrogates)
_PACKED_SLAB = "(a slab of the current layout)"


def dump(tree: Any) -> bytes:
    """Return a JSON tree as bytes (lone surrogates and sentinels become invalid UTF-8 or escapes);
    a slab's tree (``parse``) as a slab, when its values fit one."""
    if isinstance(tree, dict) and set(tree) == {_PACKED_SLAB} and isinstance(tree[_PACKED_SLAB], dict):
        with contextlib.suppress(Exception):
            return slab_whole.tree_slab(tree[_PACKED_SLAB])
    data = json.dumps(tree, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "jqueue-fuzz")
    for sentinel, raw in SENTINELS.items():
        data = data.replace(sentinel.encode(), raw)
    return data


def parse(data: bytes) -> Any:
    if data.startswith(slab_format.MAGIC):
        try:
            return {_PACKED_SLAB: slab_whole.slab_tree(data)}
        except (ValueError, zlib.error):
            return None
    try:
        return json.loads(data.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError):
        return None


def valid_effects(payload: Callable[[int], Payload]) -> list[fx.Effect]:
    """Effects that build a queue with jobs of every status, history, pauses and throttles."""

    def add(i: int, ep: str, status: JobStatus = JobStatus.QUEUED, **kw: Any) -> fx.Added:
        return fx.Added(f"job-{i}", ep, i % 3 - 1, T0 + i * S, status, kw.pop("beat", None), payload(i), **kw)

    at = [T0 + i * S for i in range(100)]
    claim, died, removed, requeued, throttle = fx.Claimed, fx.Died, fx.Removed, fx.Requeued, fx.ThrottleSet
    return [
        throttle(None, 100, S), throttle("email", 5, 60 * S), fx.PauseSet("sms", True, True),
        add(0, "email", dedup_key="k0", max_attempts=3, deadline=at[99] * 2), add(15, "sms", dedup_key="k15"),
        add(1, "sms", not_before=T0 + 3_600 * S, deadline=T0 + 7_200 * S),
        add(2, "email"), claim("job-2", at[10], "L2", at[70]), fx.Beat("job-2", at[20]),
        add(3, "email", last_error="e"), claim("job-3", at[11], "L3"), died("job-3", at[12], "limit", "x"),
        add(4, "report", dedup_key="k4"), claim("job-4", at[13]), removed("job-4", at[14]),
        add(5, "email", JobStatus.STAGED, batch="b1"), add(6, "email", JobStatus.STAGED, batch="b2"),
        add(7, "sms", JobStatus.STAGED, batch="b3"), fx.Published("b2"), fx.Discarded("b3"),
        add(8, "email"), claim("job-8", at[15], "L8", at[75]), requeued("job-8", T0 + 900 * S, "retry"),
        add(9, "report"), claim("job-9", at[16], "L9", at[20]), add(10, "email"), removed("job-10"),
        add(11, "sms"), claim("job-11", at[17], "L11"), removed("job-11", at[18]), fx.Forgotten(1),
        add(12, "email"), claim("job-12", at[19]), died("job-12", at[21], "ttl"),
        requeued("job-12", reset=True),
        throttle("x", 3, S), throttle("x", None, 0), fx.PauseSet("report", False, True),
        add(13, "email", JobStatus.IN_PROGRESS, beat=at[30], attempts=2, lease="L13", expires=at[90],
            claims=(at[5], at[30])),
        add(14, "sms", JobStatus.DEAD, attempts=1, last_error="x", dead_reason="manual", dead_at=at[40],
            claims=(at[35],)),
    ]  # fmt: skip


SLABS: dict[str, bytes] = {}
"""Every slab a checkpoint made here wrote, by name (the storage the checkpoint decoder reads)."""


def plan_of(index: QueueIndex) -> tuple[bytes, Plan]:
    """Make the checkpoint that writes every job of ``index`` (its bytes and its plan), keeping
    its slab in ``SLABS``."""
    try:
        slabs = index.cold if isinstance(index.cold, SlabSet) else SlabSet()
        taken, frozen = slabs.taken_now(), index.freeze(every_job=True)
        plan = make_plan(slabs, frozen, NOW, f"{len(SLABS):x}", every_job=True, taken=taken)
    finally:
        index.thaw()
    manifest = plan.manifest(NOW)
    if plan.slab is not None:
        SLABS[plan.slab.name] = plan.content
    return manifest, plan


def checkpoint_of(index: QueueIndex) -> bytes:
    return plan_of(index)[0]


def first_layout_checkpoint(index: QueueIndex) -> bytes:
    """A checkpoint as jqueue wrote them before slabs (``jqueue-log/1``): its jobs inline, as one block."""
    encoded, plan = plan_of(index)
    manifest = json.loads(encoded)
    blocks = slab_whole.slab_tree(plan.content)["blocks"] if plan.slab else []
    [block] = blocks or [json.loads(slab_block.encode_block([], {})[0])]
    kept = {name: manifest[name] for name in ("history", "controls") if name in manifest}
    header = {"layout": entry_format.LAYOUT, "seq": manifest["seq"], "at": manifest["at"]}
    return json.dumps({**header, **block, **kept}).encode()


def first_layout_slab(index: QueueIndex) -> bytes:
    """A slab as jqueue wrote them before claim order (``jqueue-slab/1``): rows sorted by id, in JSON."""
    rows = sorted(index.records.values(), key=lambda record: record.id)
    block = json.loads(slab_block.encode_block(rows, {})[0])
    return dump({"layout": slab_whole.FIRST_SLAB_LAYOUT, "rows": len(rows), "blocks": [block]})


def checkpoint_index(data: bytes, location: str) -> QueueIndex:
    """Read a checkpoint and the slabs it names as ``Checkpoints.read`` does (from ``SLABS``)."""
    manifest = checkpoint_format.decode_manifest(data, location)
    if any(entry.name not in SLABS for entry in manifest.slabs):  # as after relisting, in LogStore
        raise CorruptStateError(location, "it names a slab that is not there")
    contents = [SLABS[entry.name] for entry in manifest.slabs]
    for content in contents:  # every block read now: a cold one is otherwise decoded when claimed
        slab_whole.decode_slab(content, location)
    return loaded(manifest, contents, [location] * len(contents), location)[0]


def seeds(decoder: str) -> list[bytes]:
    """Valid encodings for one decoder: queues built by prefixes of ``valid_effects``."""
    cuts = (0, 4, 14, 28, None)

    def index_of(effects: list[fx.Effect], version: int) -> QueueIndex:
        index = QueueIndex()
        index.apply_all(effects)
        index.version = version
        return index

    if decoder == "state":
        effects = valid_effects(lambda i: f"payload {i}".encode())
        return [single_format.encode_index(index_of(effects[:cut], 7), 7, "commit-7") for cut in cuts]
    if decoder == "entry":
        effects = valid_effects(lambda i: bytes([i]) * i)
        return [entry_format.encode_entry(SEQ, "commit-5", T0, effects[:cut]) for cut in cuts]
    if decoder in ("checkpoint", "slab"):
        effects = valid_effects(lambda i: payload_refs.payload_ref(2, i))
        plans = [plan_of(index_of(effects[:cut], SEQ)) for cut in cuts]
        if decoder == "slab":
            first_slabs = [first_layout_slab(index_of(effects[:cut], SEQ)) for cut in cuts]
            return [plan.content for _, plan in plans if plan.slab is not None] + first_slabs
        first_layout = [first_layout_checkpoint(index_of(effects[:cut], SEQ)) for cut in cuts]
        return [manifest for manifest, _ in plans] + first_layout
    return [entry_format.encode_marker(), entry_format.encode_marker("base/00000000000000000001")]


class Probe:
    """Runs the checks of one input, remembering the step it is at (for the report)."""

    stage, format = "decode", "state"

    def step(self, stage: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.stage = stage
        return call(*args, **kwargs)

    def exercise(self, index: QueueIndex, payload_of: Callable[[Payload], bytes]) -> None:
        """Read everything of a decoded index, then claim, sweep, ack, nack, publish, revive and
        purge as workers and tools would, re-encoding the index (``reencode``) before and after."""
        for record in list(index.records.values()):
            self.step("job_from", job_from, record.as_added(), payload_of(record.payload))
        for done in index.history:
            self.step("history", lambda h: (h.created_at, h.claimed_at, h.finished_at, h.as_job()), done)
        scopes = {r.entrypoint for r in index.records.values()} | {"?"}
        for scope in sorted(scopes | {s for s in index.controls.throttles if s is not None}):
            self.step("controls", index.controls.remaining, scope, NOW)
        self.step("stats_of", stats_of, index, NOW)
        self.reencode(index, "")
        claimed = self.step("claim", index.claim, None, 10, NOW, NOW + S, lambda: "lease")
        self.step("requeue_expired", index.requeue_expired, NOW)
        for number, done in enumerate(claimed):
            if number == 0:
                self.step("ack", index.remove, done.job_id, done.lease, NOW)
            else:
                self.step("nack", index.nack, done.job_id, done.lease, NOW, NOW + S, "failed", max_attempts=2)
        for batch in list(index.staged_batches()):
            self.step("publish", index.publish, batch)
        self.step("requeue_dead", index.requeue_dead)
        self.step("requeue_stale", index.requeue_stale, NOW, NOW)
        self.step("forget", index.forget, NOW, 2)
        self.step("stats_of after claim", stats_of, index, NOW)
        self.reencode(index, "after claim")
        for job_id in list(index.records):
            self.step("purge", index.remove, job_id)

    def reencode(self, index: QueueIndex, when: str) -> None:
        """Encode the index as its decoder's format and decode that."""
        if self.format == "state":
            again = self.step(
                f"encode_index {when}", single_format.encode_index, index, index.version, "commit-2"
            )
            self.step(
                f"re-decode state {when}", single_format.decode_index, again, "memory://fuzz/re-encoded"
            )
        else:
            again = self.step(f"plan the checkpoint {when}", checkpoint_of, index)
            self.step(f"re-decode checkpoint {when}", checkpoint_index, again, "memory://again")

    def state(self, data: bytes, location: str) -> None:
        self.format = "state"
        self.step(
            "encode", single_format.encode_index, single_format.decode_index(data, location), 7, "commit"
        )
        index = self.step("decode_index", single_format.decode_index, data, location)
        self.exercise(index, lambda p: p if isinstance(p, bytes) else b"")

    def entry(self, data: bytes, location: str) -> None:
        self.format = "checkpoint"
        entry = entry_format.decode_entry(data, SEQ, location)
        self.stage, index = "replay", QueueIndex()
        try:  # as LogStore._apply_entry
            index.apply_all(entry.effects)
        except ValueError as exc:
            raise CorruptStateError(location, f"does not replay on the state before it: {exc}") from exc
        index.version, place = entry.seq, payload_refs.payload_place
        self.exercise(
            index, lambda p: entry.payloads[place(int(p))[1]] if place(int(p))[0] == entry.seq else b""
        )

    def checkpoint(self, data: bytes, location: str) -> None:
        self.format = "checkpoint"
        self.exercise(checkpoint_index(data, location), lambda _: b"")

    def slab(self, data: bytes, location: str) -> None:
        self.format = "checkpoint"
        decoded = slab_whole.decode_slab(data, location)
        entry = checkpoint_format.SlabEntry("slab/x", len(decoded.ids), b"")
        manifest = checkpoint_format.Manifest(SEQ, NOW, [entry], [], Controls())
        self.exercise(loaded(manifest, [data], [location], location)[0], lambda _: b"")

    def marker(self, data: bytes, location: str) -> None:
        entry_format.decode_marker(data, location)


LOCATIONS = {
    "state": "memory://fuzz/queue.json",
    "entry": f"memory://fuzz/{entry_format.entry_name(SEQ)}",
    "checkpoint": f"memory://fuzz/{entry_format.checkpoint_name(SEQ, NOW)}",
    "slab": f"memory://fuzz/{slab_format.slab_name(SEQ, NOW, '0')}",
    "marker": "memory://fuzz/queue",
}


def raised_at(exc: BaseException) -> tuple[str, str]:
    """Return the innermost line of src/jqueue in the traceback, and the one that called it."""
    frames = [(Path(f.filename).resolve(), f.lineno) for f in traceback.extract_tb(exc.__traceback__)]
    lines = ["-", "-", *(f"src/{p.relative_to(SRC.parent)}:{n}" for p, n in frames if p.is_relative_to(SRC))]
    return lines[-1] if len(lines) > 2 else "<outside src/jqueue>", lines[-2]


class Outcome(NamedTuple):
    failure: Failure
    via: str
    stage: str
    message: str


def run(decoder: str, data: bytes) -> Outcome | None:
    """Check one input; None when it decodes to a valid state or is rejected as it should be."""
    probe, location = Probe(), LOCATIONS[decoder]
    try:
        getattr(probe, decoder)(data, location)
    except CorruptStateError as exc:
        where, via = raised_at(exc)
        if probe.stage.startswith("re-decode"):
            return Outcome(("CorruptStateError on re-decode", where), via, probe.stage, exc.detail)
        if exc.location != location:
            return Outcome(("CorruptStateError, wrong location", where), via, probe.stage, exc.location)
        return None
    except Exception as exc:
        where, via = raised_at(exc)
        return Outcome((type(exc).__name__, where), via, probe.stage, str(exc)[:150])
    return None


def paths(tree: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from paths(value, (*prefix, key))


def node(tree: Any, path: Path_) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def replaced(tree: Any, path: Path_, value: Any) -> Any:
    """Return ``tree`` with the node at ``path`` replaced by ``value`` (copying only the path)."""
    if not path:
        return value
    copy: Any = list(tree) if isinstance(tree, list) else dict(tree)
    copy[path[0]] = replaced(tree[path[0]], path[1:], value)
    return copy


def deleted(tree: Any, path: Path_) -> Any:
    copy: Any = node(tree, path[:-1]).copy()
    del copy[path[-1]]
    return replaced(tree, path[:-1], copy)


def interesting(rng: random.Random, old: Any, tree: Any) -> Any:
    """A replacement for ``old``: a value of its type likely to break something, or any other."""
    if isinstance(old, int) and not isinstance(old, bool) and rng.random() < 0.7:
        return rng.choice([0, 0, -1, 1, rng.choice(INTS), old + 1, old - 1, -old, old << 24, old * S])
    if isinstance(old, str) and rng.random() < 0.7:
        return rng.choice([*STRINGS, old + "\x7fBAD\x7f", old[:-1], old + "\ud800"])
    some = [rng.choice(INTS), rng.choice(FLOATS), rng.choice(STRINGS), None, True, [], {}, [None], {"": 0}]
    if isinstance(tree, list | dict) and tree and rng.random() < 0.3:  # any node of the tree
        return node(tree, rng.choice(list(paths(tree))))
    return rng.choice(some)


def mutate_tree(rng: random.Random, tree: Any) -> Any:
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        candidates = list(paths(tree))
        if not candidates:
            return interesting(rng, tree, tree)
        path = rng.choice(candidates)
        old, parent, key, roll = node(tree, path), node(tree, path[:-1]), path[-1], rng.random()
        if roll < 0.12:
            tree = deleted(tree, path)
        elif roll < 0.22 and isinstance(key, int):
            tree = replaced(tree, path[:-1], [*parent[: key + 1], old, *parent[key + 1 :]])
        elif roll < 0.3 and isinstance(key, int):  # a sibling's value: duplicate keys, ids, times
            tree = replaced(tree, path, rng.choice(parent))
        elif roll < 0.38 and isinstance(old, list) and old:
            tree = replaced(tree, path, rng.choice([[], old[:-1], old[::-1], [*old, old[0]], old[1:]]))
        else:
            tree = replaced(tree, path, interesting(rng, old, tree))
    return tree


def inputs(rng: random.Random, seeds: list[bytes], count: int) -> Iterator[bytes]:
    """Random bytes or JSON (10%), byte-level (10%) and JSON-level mutations of valid encodings."""
    trees = [parse(seed) for seed in seeds]
    for _ in range(count):
        roll, data = rng.random(), rng.choice(seeds)
        i, j = sorted(rng.randrange(len(data) + 1) for _ in range(2))
        if roll < 0.05:
            yield rng.randbytes(rng.randrange(64))
        elif roll < 0.1:
            yield dump(interesting(rng, None, rng.choice(trees)))
        elif roll < 0.2:
            yield rng.choice([data[:i], data[:i] + rng.randbytes(1) + data[i + 1 :], data[:j] + data[i:],
                              data[:i] + rng.randbytes(j - i) + data[j:], data[:i] + data[j:]])  # fmt: skip
        else:
            yield dump(mutate_tree(rng, rng.choice(trees)))


def smaller(tree: Any) -> Iterator[Any]:
    """Yield simpler variants of a JSON tree: a row dropped from all of a checkpoint's columns, a
    node dropped, a node replaced by a plain value or cut in half."""
    lengths = Counter(len(v) for v in tree.values() if isinstance(v, list)) if isinstance(tree, dict) else {}
    rows = max((n for n, count in lengths.items() if count >= 3), default=0)
    for row in range(rows):
        yield {k: v[:row] + v[row + 1 :] if isinstance(v, list) and len(v) == rows else v
               for k, v in tree.items()}  # fmt: skip
    for path in paths(tree):
        old = node(tree, path)
        yield deleted(tree, path)
        for new in [0, "", None, [], {}, old[: len(old) // 2] if isinstance(old, str | list) else 0]:
            if new != old or type(new) is not type(old):
                yield replaced(tree, path, new)


def shrink(decoder: str, failure: Failure, data: bytes, budget: int) -> bytes:
    """Return a smaller input that still fails the same way (within ``budget`` runs)."""

    def fails(candidate: bytes) -> bool:
        nonlocal budget
        budget -= 1
        outcome = run(decoder, candidate)
        return outcome is not None and outcome.failure == failure

    best, tree = data, parse(data)
    if tree is not None and not fails(dump(tree)):
        tree = None
    while tree is not None and budget > 0:
        candidates = takewhile(lambda _: budget > 0, smaller(tree))
        tree = next((c for c in candidates if len(dump(c)) < len(best) and fails(dump(c))), None)
        best = best if tree is None else dump(tree)
    return best


@dataclass
class Tally:
    decoders: Counter[str] = field(default_factory=Counter)
    paths: Counter[str] = field(default_factory=Counter)
    examples: dict[str, bytes] = field(default_factory=dict)  # the smallest, per decoder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fuzz jqueue's state decoders.")
    parser.add_argument("--inputs", type=int, default=2_000, help="inputs per decoder (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--shrink", type=int, default=3_000, help="checks spent shrinking each example")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    tallies: dict[Failure, Tally] = {}
    for decoder in LOCATIONS:
        valid = seeds(decoder)
        assert all(run(decoder, data) is None for data in valid), f"a valid {decoder} encoding fails"
        for data in inputs(rng, valid, args.inputs):
            if (outcome := run(decoder, data)) is None:
                continue
            tally = tallies.setdefault(outcome.failure, Tally())
            tally.decoders[decoder] += 1
            tally.paths[f"{outcome.stage} via {outcome.via}"] += 1
            if len(data) < len(tally.examples.get(decoder, data + b" ")):
                tally.examples[decoder] = data
    print(f"{args.inputs} inputs per decoder, {len(LOCATIONS)} decoders, seed {args.seed}: "
          f"{len(tallies)} classes of failures\n")  # fmt: skip
    for number, (failure, tally) in enumerate(
        sorted(tallies.items(), key=lambda i: -i[1].decoders.total()), 1
    ):
        shrunk = [(shrink(d, failure, data, args.shrink), d) for d, data in tally.examples.items()]
        small, decoder = min(shrunk, key=lambda pair: len(pair[0]))
        outcome = run(decoder, small)
        assert outcome is not None
        decoders = ", ".join(f"{name} {n}" for name, n in tally.decoders.most_common())
        print(f"#{number} {failure[0]} at {failure[1]}: {tally.decoders.total()} inputs ({decoders})")
        for path, n in tally.paths.most_common(6):
            print(f"    {n:6d}  {path}")
        text = repr(small)
        text = text if len(text) <= 200 else f"{text[:90]} ... {text[-105:]}"
        print(f"  example ({decoder}, {outcome.stage}): {text}\n  message: {outcome.message}\n")
    return 1 if tallies else 0


if __name__ == "__main__":
    raise SystemExit(main())
