"""The decoders' contract: any bytes either decode to a state that everything downstream can use,
or raise ``CorruptStateError`` naming the object they came from.

"Usable" means: every job becomes a public ``Job``, history records give their times, throttles
answer ``remaining``, ``stats_of`` works, the state re-encodes to bytes that decode again, and
claims, lease sweeps, acks, nacks, publishing, revival and purges run without an untyped error.
Property tests feed arbitrary bytes and mutations of valid encodings; the regression examples
below are the smallest inputs ``tools/fuzz_decoders.py`` found for each class of failure (that
tool searches much longer).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, NamedTuple

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import reference_model
from jqueue.core.formats import checkpoint as checkpoint_format
from jqueue.core.formats import entry as entry_format
from jqueue.core.formats import payload_refs, slab_block, slab_whole
from jqueue.core.formats import single as single_format
from jqueue.core.formats import slab as slab_format
from jqueue.core.log.parts import StoredPart
from jqueue.core.log.slab_load import loaded
from jqueue.core.log.slab_plan import plan
from jqueue.core.log.slabs import SlabSet
from jqueue.domain import effects as fx
from jqueue.domain.controls import Controls
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import JobStatus
from jqueue.domain.schema import Payload, job_from
from jqueue.domain.stats import stats_of
from jqueue.domain.times import to_micros
from tool_runs import run_tool

S = 1_000_000
T0 = to_micros(datetime(2026, 1, 1, tzinfo=UTC))
NOW = T0 + 600 * S
SEQ = 5
LOCATIONS = {
    "state": "memory://fuzz/queue.json",
    "entry": f"memory://fuzz/queue.json.d/{entry_format.entry_name(SEQ)}",
    "checkpoint": f"memory://fuzz/queue.json.d/{entry_format.checkpoint_name(SEQ, NOW)}",
    "slab": "memory://fuzz/queue.json.d/slab",
}
PayloadOf = Callable[[Payload], bytes]
Reencode = Callable[[QueueIndex], None]


# --- decoding, and using what was decoded ------------------------------------------------------


def state_again(index: QueueIndex) -> None:
    single_format.decode_index(
        single_format.encode_index(index, index.version, "again"), "memory://fuzz/again"
    )


class Written(NamedTuple):
    """A checkpoint's bytes, and its new slab's name and bytes (if it has one)."""

    manifest: bytes
    slab: str | None
    content: bytes


def plan_of(index: QueueIndex, tag: str = "0") -> Written:
    """The checkpoint (manifest and slab) that writes every job of ``index``."""
    try:
        slabs = index.cold if isinstance(index.cold, SlabSet) else SlabSet()
        taken = slabs.taken_now()
        made = plan(slabs, index.freeze(every_job=True), NOW, tag, every_job=True, taken=taken)
    finally:
        index.thaw()
    manifest = made.manifest(NOW)
    return Written(manifest, None if made.slab is None else made.slab.name, made.content)


def checkpoint_again(index: QueueIndex) -> None:
    written = plan_of(index)
    manifest = checkpoint_format.decode_manifest(written.manifest, "memory://fuzz/again")
    contents = [written.content] if written.slab else []
    loaded(manifest, contents, ["memory://fuzz/again"] * len(contents), "memory://fuzz/again")


def decode_state(data: bytes, location: str) -> tuple[QueueIndex, PayloadOf, Reencode]:
    reference_model.encode(
        reference_model.decode(data, location), "again"
    )  # the QueueState view of the same bytes
    index = single_format.decode_index(data, location)
    return index, lambda payload: payload if isinstance(payload, bytes) else b"", state_again


def decode_entry(data: bytes, location: str) -> tuple[QueueIndex, PayloadOf, Reencode]:
    entry = entry_format.decode_entry(data, SEQ, location)
    assert entry_format.decode_payloads(data, SEQ, location) == entry.payloads  # as a claim reads them
    index = QueueIndex()
    try:  # as LogStore._apply_entry
        index.apply_all(entry.effects)
    except ValueError as exc:
        raise CorruptStateError(location, f"does not replay on the state before it: {exc}") from exc
    index.version = entry.seq

    def payload_of(ref: Payload) -> bytes:
        assert isinstance(ref, int)
        segment, position = payload_refs.payload_place(ref)
        return entry.payloads[position] if segment == entry.seq else b""

    return index, payload_of, checkpoint_again


def decode_checkpoint(data: bytes, location: str) -> tuple[QueueIndex, PayloadOf, Reencode]:
    manifest = checkpoint_format.decode_manifest(data, location)
    if any(entry.name not in SLABS for entry in manifest.slabs):  # as Checkpoints.read, after relisting
        raise CorruptStateError(location, "names a slab that is not there")
    contents = [SLABS[entry.name] for entry in manifest.slabs]
    for content in contents:  # every block read now: a cold one is otherwise decoded when claimed
        slab_whole.decode_slab(content, LOCATIONS["slab"])
    index = loaded(manifest, contents, [LOCATIONS["slab"]] * len(contents), location)[0]
    return index, lambda _: b"", checkpoint_again


def decode_slab(data: bytes, location: str) -> tuple[QueueIndex, PayloadOf, Reencode]:
    rows = slab_whole.decode_slab(data, location)  # every block read now, as above
    entry = checkpoint_format.SlabEntry("slab/x", len(rows.ids), b"")
    manifest = checkpoint_format.Manifest(SEQ, NOW, [entry], [], Controls())
    return loaded(manifest, [data], [location], location)[0], lambda _: b"", checkpoint_again


DECODERS = {
    "state": decode_state,
    "entry": decode_entry,
    "checkpoint": decode_checkpoint,
    "slab": decode_slab,
}


def use(index: QueueIndex, payload_of: PayloadOf, again: Reencode) -> None:
    """Do with a decoded index what the queue, its workers and its tools do."""
    for record in list(index.records.values()):
        job_from(record.as_added(), payload_of(record.payload))
    for done in index.history:
        _ = done.created_at, done.claimed_at, done.finished_at, done.as_job()
    scopes = {r.entrypoint for r in index.records.values()} | {s for s in index.controls.throttles if s}
    for scope in sorted(scopes | {"", "?"}):
        index.controls.remaining(scope, NOW)
    stats_of(index, NOW)
    again(index)
    claimed = index.claim(None, 10, NOW, NOW + S, lambda: "lease")
    index.requeue_expired(NOW)
    for number, claim in enumerate(claimed):
        if number == 0:
            index.remove(claim.job_id, claim.lease, NOW)
        else:
            index.nack(claim.job_id, claim.lease, NOW, NOW + S, "failed", max_attempts=2)
    for batch in list(index.staged_batches()):
        index.publish(batch)
    index.requeue_dead()
    stats_of(index, NOW)
    again(index)
    for job_id in list(index.records):
        index.remove(job_id)


def check(decoder: str, data: bytes) -> None:
    """Assert the contract for one input (any other exception fails the test)."""
    location = LOCATIONS[decoder]
    try:
        decoded = DECODERS[decoder](data, location)
    except CorruptStateError as exc:
        if exc.location != location:
            raise AssertionError(f"the error names {exc.location!r}, not {location!r}") from exc
        return
    use(*decoded)


# --- valid encodings ------------------------------------------------------------------------


def valid_effects(payload: Callable[[int], Payload]) -> list[fx.Effect]:
    """Jobs of every status, history (acked, dead, forgotten), pauses and throttles with usage."""

    def add(i: int, status: JobStatus = JobStatus.QUEUED, **extra: Any) -> fx.Added:
        heartbeat = extra.pop("heartbeat", None)
        return fx.Added(
            f"j{i}", "email" if i % 2 else "sms", i % 3, T0 + i * S, status, heartbeat, payload(i), **extra
        )

    at = [T0 + i * S for i in range(100)]
    return [
        fx.ThrottleSet(None, 100, S), fx.ThrottleSet("email", 5, 60 * S), fx.PauseSet("sms", True, True),
        add(0, dedup_key="k0", max_attempts=3, deadline=at[99] + 86_400 * S), add(1, dedup_key="k1"),
        add(2, not_before=T0 + 3_600 * S), fx.Claimed("j1", at[10], "L1", at[70]), fx.Beat("j1", at[20]),
        add(3), fx.Claimed("j3", at[11], "L3"), fx.Died("j3", at[12], "max_attempts", "boom"),
        add(5), fx.Claimed("j5", at[13]), fx.Removed("j5", at[14]), fx.Forgotten(1),
        add(6, JobStatus.STAGED, batch="b1"), add(7, JobStatus.STAGED, batch="b2"), fx.Published("b2"),
        add(9), fx.Claimed("j9", at[15], "L9", at[16]), fx.Requeued("j9", at[90], "retry"),
        add(11), fx.Removed("j11"), fx.ThrottleSet("sms", 3, S), fx.PauseSet(None, False, True),
        fx.SinkMarked("query-1", 7), fx.Owned("broker-1", 3), fx.Resharded(4),
        add(13, JobStatus.IN_PROGRESS, heartbeat=at[30], attempts=2, lease="L13", expires=at[90],
            claims=(at[5], at[30])),
        add(15, JobStatus.DEAD, attempts=1, last_error="x", dead_reason="manual", dead_at=at[40],
            claims=(at[35],)),
    ]  # fmt: skip


PART = StoredPart(1 << 62 | 5, "bulk", str(uuid.UUID(int=7, version=4)), 5, {"priority": [0, -1, 2, 0, 1]})


def index_of(effects: list[fx.Effect]) -> QueueIndex:
    index = QueueIndex()
    index.apply_all(effects)
    index.version = SEQ
    return index


def first_layout_checkpoint(written: Written) -> bytes:
    """A checkpoint as jqueue wrote them before slabs (``jqueue-log/1``): its jobs as one block, inline."""
    manifest = json.loads(written.manifest)
    blocks = slab_whole.slab_tree(written.content)["blocks"] if written.slab else []
    [block] = blocks or [json.loads(slab_block.encode_block([], {})[0])]
    header = {"layout": entry_format.LAYOUT, "seq": manifest["seq"], "at": manifest["at"]}
    kept = {name: manifest[name] for name in ("history", "controls") if name in manifest}
    return json.dumps({**header, **block, **kept}).encode()


CUTS = (0, 4, 12, None)
PLANS = [
    plan_of(index_of(valid_effects(lambda i: payload_refs.payload_ref(2, i))[:cut]), str(number))
    for number, cut in enumerate(CUTS)
]
SLABS = {written.slab: written.content for written in PLANS if written.slab is not None}


def first_layout_slab(index: QueueIndex) -> bytes:
    """A slab as jqueue wrote them before claim order (``jqueue-slab/1``): rows sorted by id, in JSON."""
    rows = sorted(index.records.values(), key=lambda record: record.id)
    block = json.loads(slab_block.encode_block(rows, {})[0])
    return json.dumps({"layout": slab_whole.FIRST_SLAB_LAYOUT, "rows": len(rows), "blocks": [block]}).encode()


SEEDS = {
    "state": [
        single_format.encode_index(index_of(valid_effects(lambda i: b"p%d" % i)[:cut]), SEQ, "c")
        for cut in CUTS
    ],
    "entry": [
        *(entry_format.encode_entry(SEQ, "c", T0, valid_effects(lambda i: b"p%d" % i)[:cut]) for cut in CUTS),
        entry_format.encode_entry(SEQ, "c", T0, PART.jobs(T0)[:3] + PART.jobs(T0)[4:]),  # a bulk write's runs
    ],
    "checkpoint": [w.manifest for w in PLANS] + [first_layout_checkpoint(w) for w in PLANS],
    "slab": [
        *SLABS.values(),
        *(
            first_layout_slab(index_of(valid_effects(lambda i: payload_refs.payload_ref(2, i))[:c]))
            for c in CUTS
        ),
    ],
}


# --- mutations of valid encodings ---------------------------------------------------------------

Place = tuple[Any, Any]  # (a list or dict of the tree, an index or key in it)


def places(tree: Any) -> Iterator[Place]:
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        yield tree, key
        yield from places(value)


EDGE_INTS = [
    0,
    -1,
    2**24,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    2**70,
    10**400,
    253_402_300_800 * S,
    -62_135_596_801 * S,
]
WORDS = ["", "\ud800", "\udfff", "\x7f", *JobStatus, "add", "claim", "throttle", "j1", "k0", "b1",
         entry_format.LAYOUT, "0001-01-01T00:00:00+01:00",
         "9999-12-31T23:59:59.999999-01:00", "2026-01-01T00:00:00"]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(EDGE_INTS),
    st.integers(),
    st.sampled_from(WORDS),
    st.text(max_size=4),
    st.floats(),
    st.sampled_from(["null", "true", "false", "[]", "{}", "[0]", '{"":0}']).map(json.loads),  # fresh
)


@st.composite
def mutated(draw: st.DrawFn, decoder: str) -> bytes:
    """A valid encoding with one to three values replaced (by edge values or a sibling's value),
    deleted or duplicated, written with escaped or raw lone surrogates, maybe truncated."""
    seed = draw(st.sampled_from(SEEDS[decoder]))
    packed = decoder == "slab" and seed.startswith(slab_format.MAGIC)
    tree = slab_whole.slab_tree(seed) if packed else json.loads(seed)
    for _ in range(draw(st.integers(1, 3))):
        found = list(places(tree))
        if not found:
            break
        parent, key = found[draw(st.integers(0, len(found) - 1))]  # (an index: NaN values hash apart)
        how, old = draw(st.sampled_from(["replace", "delete", "sibling", "duplicate"])), parent[key]
        if how == "replace" and isinstance(old, int) and not isinstance(old, bool):  # mostly by an int
            parent[key] = draw(st.sampled_from(EDGE_INTS) | st.integers() | VALUES)
        elif how == "replace" and isinstance(old, str):  # mostly by a status, tag, time, id...
            parent[key] = draw(st.sampled_from(WORDS) | VALUES)
        elif how == "delete":
            del parent[key]
        elif how == "sibling" and isinstance(parent, list):
            parent[key] = parent[draw(st.integers(0, len(parent) - 1))]
        elif how == "duplicate" and isinstance(parent, list):
            parent.insert(key, parent[key])
        else:
            parent[key] = draw(VALUES)
    if packed:  # a slab of the current layout: its blocks and header mutated, the rest made to fit
        try:
            return slab_whole.tree_slab(tree)
        except (TypeError, OverflowError, KeyError, IndexError, ValueError, msgspec.EncodeError):
            assume(False)
    text = json.dumps(tree, ensure_ascii=draw(st.booleans()), separators=(",", ":"))
    data = text.encode("utf-8", "surrogatepass").replace(b"\x7f", b"\xff")  # lone surrogates, bad bytes
    cut = draw(st.integers(0, 9))  # 1 in 10 truncated
    return data[: draw(st.integers(0, len(data)))] if cut == 9 else data


FUZZ = settings(
    max_examples=200, deadline=None, report_multiple_bugs=False, suppress_health_check=[HealthCheck.too_slow]
)
MUTATIONS = settings(FUZZ, max_examples=800)


@pytest.mark.parametrize("decoder", DECODERS)
def test_valid_encodings_meet_the_contract(decoder: str) -> None:
    for data in SEEDS[decoder]:
        check(decoder, data)


@pytest.mark.parametrize("decoder", DECODERS)
@FUZZ
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_meet_the_contract(decoder: str, data: bytes) -> None:
    check(decoder, data)


@pytest.mark.parametrize("decoder", DECODERS)
@MUTATIONS
@given(data=st.data())
def test_mutated_encodings_meet_the_contract(decoder: str, data: st.DataObject) -> None:
    check(decoder, data.draw(mutated(decoder), label="input"))


@FUZZ
@given(data=st.binary(max_size=100) | st.sampled_from([b'{"layout":"\xff"}', b'{"layout":"\\ud800"}']))
def test_any_bytes_are_a_marker_or_not(data: bytes) -> None:
    try:
        is_log, base = entry_format.decode_marker(data, "memory://fuzz/queue.json")
    except CorruptStateError:  # a marker naming a base outside the queue
        return
    assert isinstance(is_log, bool)
    assert base is None or isinstance(base, str)


# --- regression examples: the smallest inputs of each class the fuzzer found ----------------------


def entry(*effects: fx.Effect) -> bytes:
    return entry_format.encode_entry(SEQ, "c", T0, list(effects))


def added(job_id: str = "j", **fields: Any) -> fx.Added:
    return fx.Added(job_id, "e", 0, fields.pop("created", T0), JobStatus.QUEUED, None, b"p", **fields)


def state(jobs: list[dict[str, Any]] | None = None, **fields: Any) -> bytes:
    return json.dumps({"version": 1, "jobs": jobs or [], **fields}).encode()


JOB = {
    "id": "j",
    "entrypoint": "e",
    "payload": "cA==",
    "status": "queued",
    "priority": 0,
    "created_at": "2026-01-01T00:00:00Z",
}


def checkpoint(rows: int = 1, **columns: Any) -> bytes:
    base = {
        "layout": entry_format.LAYOUT,
        "seq": SEQ,
        "at": NOW,
        "entrypoints": ["e"],
        "ids": [f"j{n}" for n in range(rows)],
    }
    base |= {name: [value] * rows for name, value in [("entrypoint", 0), ("priority", 0), ("created", T0),
             ("status", "queued"), ("heartbeat", None), ("segment", 2)]}  # fmt: skip
    return json.dumps(base | {"order": list(range(rows)), "position": list(range(rows))} | columns).encode()


BEFORE_YEAR_1, AFTER_YEAR_9999 = -62_135_596_801 * S, 253_402_300_800 * S
USED_UP = {"throttles": [[None, 5, 0]], "usage": [[None, 0, 1]]}

REGRESSIONS = [
    # Times outside datetime's range (years 1-9999) are not rejected at decode: OverflowError in
    # from_micros (effects.py) from job_from, HistoryRecord's *_at, stats_of or encode_index.
    pytest.param("entry", entry(added(created=BEFORE_YEAR_1)), id="entry-created-before-year-1"),
    pytest.param("entry", entry(added(deadline=2**63 - 1)), id="entry-deadline-int64-max"),
    pytest.param("entry", entry(added(claims=(AFTER_YEAR_9999,))), id="entry-claim-time-after-9999"),
    pytest.param("entry", entry(added(), fx.Died("j", 2**70, "ttl")), id="entry-death-at-2**70"),
    pytest.param(
        "state", state([JOB | {"created_at": "0001-01-01T00:00:00+01:00"}]), id="state-created-year-0-utc"
    ),
    pytest.param(
        "state", state([JOB | {"created_at": "9999-12-31T23:59:59.999999-01:00"}]), id="state-year-10000-utc"
    ),
    pytest.param(
        "state", state(history=[["j", "e", T0, [], AFTER_YEAR_9999, 1, "acked"]]), id="state-history-finished"
    ),
    pytest.param(
        "checkpoint", checkpoint(heartbeat=[-(2**63)], status=["in_progress"]), id="checkpoint-heartbeat"
    ),
    pytest.param("checkpoint", checkpoint(created=[BEFORE_YEAR_1]), id="checkpoint-created-before-year-1"),
    # A throttle window of 0 is not rejected: ZeroDivisionError in Controls.count_claim (on a replayed
    # or new claim; replay lets it escape LogStore._apply_entry, which only converts ValueError) and in
    # Controls.remaining (throttle with usage; claims, throttle checks).
    pytest.param("entry", entry(fx.ThrottleSet(None, 5, 0), added()), id="entry-throttle-window-0-claim"),
    pytest.param(
        "entry", entry(fx.ThrottleSet("e", 5, 0), added(), fx.Claimed("j", T0)), id="entry-window-0-replay"
    ),
    pytest.param("state", state(controls=USED_UP), id="state-throttle-window-0-remaining"),
    pytest.param("checkpoint", checkpoint(controls=USED_UP), id="checkpoint-throttle-window-0-remaining"),
    # A window too large for a float is not rejected: OverflowError in stats_of (window / 1e6).
    pytest.param(
        "state", state(controls={"throttles": [["e", 5, 10**400]]}), id="state-window-10**400-stats"
    ),
    pytest.param("entry", entry(fx.ThrottleSet("e", 5, 10**400)), id="entry-window-10**400-stats"),
    # Two live jobs of a checkpoint with one dedup key are not rejected (a log replay rejects them):
    # KeyError in QueueIndex._delete when the second one leaves the queue.
    pytest.param("checkpoint", checkpoint(2, dedup_key=["k", "k"]), id="checkpoint-duplicate-dedup-key"),
    # An empty tenant is not rejected: it sorts with no tenant but made a line of its own, so a
    # checkpoint wrote a slab whose lines overlap (CorruptStateError at "a slab being written").
    pytest.param(
        "entry",
        entry(added("a"), added("b", created=T0 + 1, tenant=""), added("c", created=T0 + 2)),
        id="entry-empty-tenant",
    ),
    # Guards (pass today): invalid UTF-8, lone surrogates, payload positions beyond an entry.
    pytest.param(
        "state", state([JOB | {"id": "\udcff"}]).replace(b"\\udcff", b"\xff"), id="state-invalid-utf8"
    ),
    pytest.param("entry", entry(added("\x7f")).replace(b"\x7f", b"\xed\xa0\x80"), id="entry-raw-surrogate"),
    pytest.param("checkpoint", checkpoint(ids=["\ud800"]), id="checkpoint-escaped-lone-surrogate"),
    pytest.param(
        "checkpoint",
        checkpoint(position=[payload_refs.POSITIONS_PER_SEGMENT]),
        id="checkpoint-position-too-large",
    ),
]


@pytest.mark.parametrize(("decoder", "data"), REGRESSIONS)
def test_regression_examples_meet_the_contract(decoder: str, data: bytes) -> None:
    check(decoder, data)


def test_the_longer_search_runs_clean() -> None:
    """``tools/fuzz_decoders.py`` (a longer search than this file's) still runs every decoder."""
    done = run_tool("fuzz_decoders.py", "--inputs", "200", "--seed", "1", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 decoders, seed 1: 0 classes of failures" in done.stdout
