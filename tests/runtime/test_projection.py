"""Pure Folder tests over MemoryStore: rejection rollback, quarantine, overlay reads, state
format checks, batch-size independence and discard on a failed commit."""

from __future__ import annotations

import gc
import random
from typing import ClassVar

import msgspec
import pytest

from streamproc import metrics
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.projections.activity import Activity, read_all
from streamproc.runtime.projection import Folder, Projection, Rejection, StateFormatError, hosted
from streamproc.runtime.projector import report
from streamproc.state import keys
from streamproc.state.digest import state_digest
from streamproc.state.store import MemoryStore
from streamproc.state.tx import Tx

STREAM = "SCHEDULER"
EPOCH = "2024-01-01T00:00:00Z"


def cp(last_seq: int) -> keys.Checkpoint:
    return keys.Checkpoint(STREAM, EPOCH, last_seq)


def ev(
    seq: int,
    kind: str = "schedule.paused",
    tenant: str = "acme",
    reason: str | None = None,
    hlc: str | None = None,
) -> tuple[int, str, bytes]:
    """One stream message ``(seq, subject, data)`` carrying a schedule state change."""
    if kind.startswith("schedule."):
        payload: p.Payload = p.ScheduleStateChange(schedule_id=f"s{seq}", reason=reason)
    else:
        payload = p.RunCancelRequested(run_id=f"r{seq}", reason=reason)
    e = new_event(kind, tenant, payload, hlc or f"{1000 + seq}:0:n", event_id=f"e{seq}")
    return seq, f"scheduler.events.{tenant}.x.{seq}", encode(e)


def counter(store, tenant: str = "acme", cf: str = "toy") -> int | None:
    raw = store.get(cf, tenant.encode())
    return None if raw is None else int(raw)


class Toy(Projection):
    """A counter per tenant. An event whose reason is "reject" is refused *after* the fold
    wrote to the counter and to a marker key, so the rollback has something to undo."""

    name: ClassVar[str] = "toy"
    kinds: ClassVar[frozenset[str]] = frozenset(
        {"schedule.paused", "schedule.resumed", "schedule.deleted"}
    )

    def __init__(self) -> None:
        self.discarded = 0
        self.flushed = 0

    def fold(self, tx: Tx, event: Envelope) -> None:
        t = tx.table(self.name)
        key = event.tenant.encode()
        n = int(t.get(key) or b"0") + 1
        t.put(key, str(n).encode())
        t.put(b"last/" + key, event.id.encode())
        if event.payload.reason == "reject":
            t.put(b"marker/" + event.id.encode(), b"should not survive")
            t.delete(b"keep")
            raise Rejection("unknown_schedule", f"schedule {event.payload.schedule_id} unknown")

    def flush(self, tx: Tx) -> None:
        self.flushed += 1

    def discard(self) -> None:
        self.discarded += 1


class Seen(Projection):
    """Records every event id it sees, in its own family; never rejects."""

    name: ClassVar[str] = "seen"
    kinds: ClassVar[frozenset[str]] = frozenset({"schedule.deleted", "schedule.paused"})

    def fold(self, tx: Tx, event: Envelope) -> None:
        tx.table(self.name).put(event.id.encode(), event.kind.encode())


def rejections(store) -> list[tuple[bytes, keys.Rejected]]:
    return [
        (k, msgspec.json.decode(v, type=keys.Rejected))
        for k, v in store.scan(keys.META_CF, keys.REJECTION_PREFIX)
    ]


def quarantine(store) -> list[keys.Quarantined]:
    return [
        msgspec.json.decode(v, type=keys.Quarantined)
        for _, v in store.scan(keys.META_CF, keys.QUARANTINE_PREFIX)
    ]


# ---------------------------------------------------------------- rejection


def test_rejection_rolls_back_the_events_writes_and_is_recorded():
    store = MemoryStore()
    store.ensure_families(["toy"])
    store.commit({"toy": {b"keep": b"committed"}})
    folder = Folder(store, [Toy(), Seen()], role="test")
    folded = folder.apply(
        [
            ev(1),
            ev(2),
            ev(3, "schedule.deleted", reason="reject"),
            ev(4, "schedule.resumed"),
        ],
        cp(4),
    )
    assert (folded.messages, folded.applied) == (4, 3)  # a rejected event is not applied
    # events 1, 2 and 4 counted; 3's increment, marker and delete are rolled back
    assert counter(store) == 3
    assert store.get("toy", b"last/acme") == b"e4"
    assert store.get("toy", b"marker/e3") is None
    assert store.get("toy", b"keep") == b"committed"
    # another projection's writes for the same event are kept
    assert store.get("seen", b"e3") == b"schedule.deleted"
    recs = rejections(store)
    assert len(recs) == 1
    key, rec = recs[0]
    assert key == keys.seq_key(keys.REJECTION_PREFIX, 3) + b"toy"
    assert rec == keys.Rejected(
        3, "toy", "e3", "schedule.deleted", "unknown_schedule", "schedule s3 unknown"
    )
    assert folded.rejected == [rec]
    assert folder.rejected == 1
    assert folder.rejections == {"toy": {"unknown_schedule": 1}}
    assert folder.checkpoint() == cp(4)
    # the counts are committed with the batch: a new Folder over the same state has them
    assert Folder(store, [Toy(), Seen()]).rejections == {"toy": {"unknown_schedule": 1}}


def test_rejection_restores_a_value_written_earlier_in_the_batch():
    store = MemoryStore()
    folder = Folder(store, [Toy()])
    folder.apply([ev(1), ev(2)], cp(2))
    assert counter(store) == 2
    # in the next batch: event 3 writes 3, event 4 writes 4 and is rejected → back to 3,
    # event 5 writes 4, and a rejection as the very first event falls back to committed state
    folder.apply(
        [ev(3), ev(4, reason="reject"), ev(5), ev(6, reason="reject")],
        cp(6),
    )
    assert counter(store) == 4
    assert store.get("toy", b"last/acme") == b"e5"
    assert [r.seq for _, r in rejections(store)] == [4, 6]
    folder.apply([ev(7, reason="reject")], cp(7))
    assert counter(store) == 4
    assert store.get("toy", b"last/acme") == b"e5"
    assert folder.rejected == 3
    folder.apply([ev(8, tenant="beta"), ev(9)], cp(9))
    assert counter(store) == 5
    assert counter(store, "beta") == 1


# ---------------------------------------------------------------- quarantine


def test_malformed_messages_are_quarantined_and_the_batch_commits():
    store = MemoryStore()
    folder = Folder(store, [Toy()], role="qtest")
    unknown_kind = ev(3)[2].replace(b'"schedule.paused"', b'"schedule.exploded"')
    bad_tenant = ev(4)[2].replace(b'"acme"', b'"ACME"')
    huge = b"{" + b"x" * 70_000
    before = metrics.QUARANTINED.labels("qtest", "malformed_json")._value.get()
    folded = folder.apply(
        [
            ev(1),
            (2, "subj.2", b"{not json"),
            (3, "subj.3", unknown_kind),
            (4, "subj.4", bad_tenant),
            (5, "subj.5", huge),
            ev(6),
        ],
        cp(6),
    )
    assert counter(store) == 2  # good events around the bad ones still apply
    assert folder.checkpoint() == cp(6)
    q = quarantine(store)
    assert [(r.seq, r.subject, r.reason) for r in q] == [
        (2, "subj.2", "malformed_json"),
        (3, "subj.3", "unknown_kind"),
        (4, "subj.4", "invalid_envelope"),
        (5, "subj.5", "malformed_json"),
    ]
    assert q[0].data == b"{not json"
    assert q[1].data == unknown_kind
    assert "schedule.exploded" in q[1].detail
    assert len(q[3].data) == 65536
    assert all(r.detail for r in q)
    assert store.get(keys.META_CF, keys.seq_key(keys.QUARANTINE_PREFIX, 2)) is not None
    assert folder.quarantined == 4
    assert folded.quarantined == q and folded.applied == 2
    # counted by the runtime from the committed batch's outcome, not inside the fold
    assert metrics.QUARANTINED.labels("qtest", "malformed_json")._value.get() == before
    report("qtest", folded)
    after = metrics.QUARANTINED.labels("qtest", "malformed_json")._value.get()
    assert after == before + 2


def test_batch_of_only_malformed_messages_still_commits_checkpoint():
    store = MemoryStore()
    folder = Folder(store, [Toy()])
    assert folder.checkpoint() is None
    folder.apply([(10, "s", b"nope")], cp(10))
    assert folder.checkpoint() == cp(10)
    assert [r.seq for r in quarantine(store)] == [10]
    assert counter(store) is None


def test_events_off_their_own_subject_are_quarantined():
    """With the log's subject prefix, an event must sit on its tenant's and aggregate's
    subject: that is what NATS permissions restrict a producer to."""
    store = MemoryStore()
    folder = Folder(store, [Toy()], "qtest", subjects="scheduler.events.")
    _, _, data = ev(1)  # schedule.paused of acme, schedule s1
    folder.apply(
        [
            (1, b"scheduler.events.acme.schedule.s1", data),
            (2, "scheduler.events.globex.schedule.s1", data),  # another tenant's subject
            (3, "scheduler.events.acme.image.s1", data),  # another aggregate's
            (4, "scheduler.events.acme.schedule.s1.x", data),  # a token too many
            (5, "other.events.acme.schedule.s1", data),
        ],
        cp(5),
    )
    assert counter(store) == 1
    q = quarantine(store)
    assert [r.seq for r in q] == [2, 3, 4, 5]
    assert {r.reason for r in q} == {"wrong_subject"}
    assert "tenant acme on subject scheduler.events.globex.schedule.s1" in q[0].detail
    # Without the prefix (pure tests, tools) subjects are not checked.
    plain = MemoryStore()
    Folder(plain, [Toy()]).apply([(1, "anything", data)], cp(1))
    assert counter(plain) == 1


# ---------------------------------------------------------------- Table overlay


def test_table_scan_merges_pending_and_committed():
    store = MemoryStore()
    store.ensure_families(["t"])
    store.commit({"t": {b"a/1": b"c1", b"a/2": b"c2", b"a/3": b"c3", b"a/5": b"c5", b"b/1": b"cb"}})
    tx = Tx(store)
    t = tx.table("t")
    assert tx.table("t") is t
    t.put(b"a/2", b"p2")  # overrides a committed value
    t.delete(b"a/3")  # hides a committed value
    t.put(b"a/0", b"p0")  # new, before everything
    t.put(b"a/4", b"p4")  # new, between committed keys
    t.delete(b"a/9")  # deleting a key that never existed
    t.put(b"a/6", b"tmp")
    t.delete(b"a/6")  # pending put then pending delete
    t.delete(b"a/5")
    t.put(b"a/5", b"p5")  # pending delete then pending put
    t.put(b"c/1", b"pc")  # outside the prefix
    assert list(t.scan(b"a/")) == [
        (b"a/0", b"p0"),
        (b"a/1", b"c1"),
        (b"a/2", b"p2"),
        (b"a/4", b"p4"),
        (b"a/5", b"p5"),
    ]
    assert list(t.scan(b"a/", b"a/2")) == [(b"a/2", b"p2"), (b"a/4", b"p4"), (b"a/5", b"p5")]
    assert list(t.scan(b"a/", b"a/3")) == [(b"a/4", b"p4"), (b"a/5", b"p5")]
    assert [k for k, _ in t.scan()] == [b"a/0", b"a/1", b"a/2", b"a/4", b"a/5", b"b/1", b"c/1"]
    assert list(t.scan(b"b")) == [(b"b/1", b"cb")]
    assert list(t.scan(b"z")) == []
    assert t.get(b"a/3") is None
    assert t.get(b"a/2") == b"p2"
    assert t.get(b"a/1") == b"c1"
    assert t.get(b"a/6") is None
    # nothing reached the store yet
    assert store.get("t", b"a/3") == b"c3"
    assert store.get("t", b"a/0") is None
    store.commit(tx.writes)
    assert list(store.scan("t", b"a/")) == list(
        Tx(store).table("t").scan(b"a/")
    )  # after commit the store alone gives what the overlay gave
    assert [k for k, _ in store.scan("t", b"a/")] == [b"a/0", b"a/1", b"a/2", b"a/4", b"a/5"]


def test_tx_rollback_event_undoes_only_the_current_event():
    store = MemoryStore()
    store.ensure_families(["t"])
    store.commit({"t": {b"k": b"committed", b"d": b"committed"}})
    tx = Tx(store)
    t = tx.table("t")
    tx.begin(1)
    t.put(b"k", b"one")
    tx.begin(2)
    t.put(b"k", b"two")
    t.put(b"k", b"two-again")
    t.put(b"new", b"x")
    t.delete(b"d")
    tx.rollback_event()
    assert t.get(b"k") == b"one"
    assert t.get(b"new") is None
    assert t.get(b"d") == b"committed"
    assert b"new" not in tx.writes["t"]
    assert [k for k, _ in t.scan()] == [b"d", b"k"]


@pytest.mark.parametrize("seed", range(5))
def test_table_scan_matches_a_model(seed):
    rng = random.Random(seed)
    alphabet = [bytes([c]) for c in b"ab/"]
    keyspace = [b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3))) for _ in range(30)]
    store = MemoryStore()
    store.ensure_families(["t"])
    committed = {k: b"c" + k for k in rng.sample(keyspace, 12)}
    store.commit({"t": committed})
    model = dict(committed)
    tx = Tx(store)
    t = tx.table("t")
    for i in range(40):
        k = rng.choice(keyspace)
        if rng.random() < 0.4:
            t.delete(k)
            model.pop(k, None)
        else:
            t.put(k, b"p%d" % i)
            model[k] = b"p%d" % i
    for prefix in [b"", b"a", b"ab", b"b/", b"/"]:
        for start in [b"", b"a", b"b", b"ab/"]:
            want = sorted((k, v) for k, v in model.items() if k.startswith(prefix) and k >= start)
            assert list(t.scan(prefix, start)) == want, (prefix, start)


# ---------------------------------------------------------------- state format


class ToyV2(Toy):
    version: ClassVar[int] = 2


def test_projection_version_bump_refuses_old_state():
    store = MemoryStore()
    Folder(store, [Toy()]).apply([ev(1)], cp(1))
    Folder(store, [Toy()])  # same format: fine
    with pytest.raises(StateFormatError, match="streamproc replay") as info:
        Folder(store, [ToyV2()])
    assert '"toy":1' in str(info.value)
    assert '"toy":2' in str(info.value)


def test_added_projection_changes_the_format():
    store = MemoryStore()
    Folder(store, [Toy()])
    with pytest.raises(StateFormatError, match="streamproc replay"):
        Folder(store, [Toy(), Seen()])


def test_checkpoint_without_format_record_is_refused():
    store = MemoryStore()
    store.commit({keys.META_CF: {keys.CHECKPOINT_KEY: msgspec.json.encode(cp(5))}})
    with pytest.raises(StateFormatError, match="no format record"):
        Folder(store, [Toy()])


def test_duplicate_projection_names_refused():
    with pytest.raises(ValueError, match="duplicate"):
        Folder(MemoryStore(), [Toy(), Toy()])


def test_open_hook_called_once_before_folding():
    calls = []

    class Opened(Toy):
        def open(self, store):
            calls.append(store)

    store = MemoryStore()
    Folder(store, [Opened()])
    assert calls == [store]


# ---------------------------------------------------------------- Activity batching


def activity_messages(n: int = 90) -> list[tuple[int, str, bytes]]:
    rng = random.Random(7)
    kinds = ["schedule.paused", "schedule.resumed", "schedule.deleted", "run.cancel_requested"]
    msgs = []
    for seq in range(1, n + 1):
        if seq % 17 == 0:
            msgs.append((seq, "bad", b"{garbage"))
            continue
        hlc = f"{rng.randint(1, 50)}:{rng.randint(0, 3)}:node-{rng.randint(1, 3)}"
        msgs.append(ev(seq, rng.choice(kinds), rng.choice(["acme", "beta", "gamma-1"]), hlc=hlc))
    return msgs


def fold_in_batches(msgs, sizes) -> MemoryStore:
    store = MemoryStore()
    folder = Folder(store, [Activity()])
    i = 0
    sizes = iter(sizes)
    while i < len(msgs):
        size = next(sizes)
        batch = msgs[i : i + size]
        i += size
        folder.apply(batch, cp(batch[-1][0]))
    return store


def test_activity_one_batch_equals_many_batches():
    msgs = activity_messages()
    one = fold_in_batches(msgs, [len(msgs)])
    singles = fold_in_batches(msgs, [1] * len(msgs))
    rng = random.Random(3)
    mixed = fold_in_batches(msgs, [rng.randint(1, 12) for _ in range(len(msgs))])
    assert state_digest(one) == state_digest(singles) == state_digest(mixed)
    assert Folder(one, [Activity()]).checkpoint() == cp(len(msgs))

    acts = read_all(one)
    assert set(acts) == {"acme", "beta", "gamma-1"}
    good = [m for m in msgs if m[1] != "bad"]
    assert sum(a.events for a in acts.values()) == len(good)
    for a in acts.values():
        assert a.events == sum(a.counts.values())


def test_activity_survives_restart_between_batches():
    msgs = activity_messages()
    one = fold_in_batches(msgs, [len(msgs)])
    store = MemoryStore()
    for lo, hi in [(0, 30), (30, 31), (31, len(msgs))]:
        Folder(store, [Activity()]).apply(msgs[lo:hi], cp(msgs[hi - 1][0]))  # fresh process
    assert state_digest(store) == state_digest(one)


def test_activity_tracks_latest_hlc_not_latest_arrival():
    store = MemoryStore()
    Folder(store, [Activity()]).apply(
        [ev(1, hlc="10:0:n"), ev(2, hlc="9:5:n"), ev(3, hlc="10:0:m"), ev(4, hlc="10:1:a")],
        cp(4),
    )
    acme = read_all(store)["acme"]
    assert acme.last_hlc == "10:1:a"
    assert acme.last_event_id == "e4"
    assert acme.events == 4
    assert acme.counts == {"schedule.paused": 4}


# ---------------------------------------------------------------- failed commits


class FailingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def commit(self, writes):
        if self.fail:
            raise OSError("disk full")
        super().commit(writes)


def test_discard_called_when_commit_raises():
    store = FailingStore()
    toy, activity = Toy(), Activity()
    folder = Folder(store, [toy, activity])
    folder.apply([ev(1)], cp(1))
    digest = state_digest(store)
    store.fail = True
    with pytest.raises(OSError, match="disk full"):
        folder.apply([ev(2), ev(3)], cp(3))
    assert toy.discarded == 1
    assert state_digest(store) == digest  # nothing of the failed batch reached the store
    assert folder.checkpoint() == cp(1)
    # the retry after a discard counts each event once
    store.fail = False
    folder.apply([ev(2), ev(3)], cp(3))
    assert toy.discarded == 1
    assert read_all(store)["acme"].events == 3
    assert counter(store) == 3
    reference = MemoryStore()
    Folder(reference, [Toy(), Activity()]).apply([ev(1), ev(2), ev(3)], cp(3))
    assert state_digest(store) == state_digest(reference)


class Boom(Projection):
    name: ClassVar[str] = "boom"
    kinds: ClassVar[frozenset[str]] = frozenset({"schedule.deleted"})

    def fold(self, tx: Tx, event: Envelope) -> None:
        raise RuntimeError("a bug in a fold")


def test_discard_called_when_a_fold_raises():
    store = MemoryStore()
    toy, activity = Toy(), Activity()
    folder = Folder(store, [toy, activity, Boom()])
    with pytest.raises(RuntimeError, match="a bug in a fold"):
        folder.apply([ev(1), ev(2), ev(3, "schedule.deleted")], cp(3))
    assert folder.checkpoint() is None
    folder.apply([ev(1), ev(2)], cp(2))  # the retry, without the poison event
    acme = read_all(store)["acme"]
    assert acme.events == 2, acme
    assert toy.discarded == 1


class Hoarder(Seen):
    """Asks the runtime to keep the cyclic GC off while its batches fold."""

    name: ClassVar[str] = "hoarder"
    pauses_gc: ClassVar[bool] = True

    def __init__(self) -> None:
        self.gc_during: list[bool] = []
        self.fail = False

    def fold(self, tx: Tx, event: Envelope) -> None:
        self.gc_during.append(gc.isenabled())
        if self.fail:
            raise RuntimeError("a fold that breaks: the batch does not commit")
        super().fold(tx, event)


def test_the_runtime_pauses_the_gc_for_a_projection_that_asks_and_restores_it():
    store = MemoryStore()
    hoarder = Hoarder()
    folder = Folder(store, [hoarder])
    assert gc.isenabled()
    folder.apply([ev(1), ev(2)], cp(2))
    assert hoarder.gc_during == [False, False] and gc.isenabled()
    hoarder.fail = True  # a batch that cannot commit: the GC is back on all the same
    with pytest.raises(RuntimeError):
        folder.apply([ev(3)], cp(3))
    assert gc.isenabled()
    plain = Folder(MemoryStore(), [Seen()])
    seen: list[bool] = []
    plain.projections[0].fold = lambda tx, e: seen.append(gc.isenabled())  # type: ignore[method-assign]
    plain.apply([ev(4)], cp(4))
    assert seen == [True]


def test_a_hosted_projection_is_found_by_name_and_type() -> None:
    activity = Activity()
    assert hosted({Activity.name: activity, "other": object()}, Activity) is activity
    with pytest.raises(LookupError, match=rf"^no '{Activity.name}' projection in this process$"):
        hosted({}, Activity)
    with pytest.raises(LookupError, match=r"in this process: host the activity role$"):
        hosted({}, Activity, needs="host the activity role")
    with pytest.raises(TypeError, match=r"is a MemoryStore, not Activity$"):
        hosted({Activity.name: MemoryStore()}, Activity)
