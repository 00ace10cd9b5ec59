"""The one fold style: every role's projection folds through typed handlers checked against
the event catalog (none is on the untyped adapter), registration refuses what does
not fit the catalog, and what folds tally is counted once, after the batch commits."""

from __future__ import annotations

from typing import ClassVar

import pytest
from prometheus_client import REGISTRY as DEFAULT_REGISTRY
from prometheus_client import CollectorRegistry, Counter

from streamproc import metrics
from streamproc.audit.entry import CHAINED_KINDS
from streamproc.audit.log import AuditLog
from streamproc.config import Configuration
from streamproc.events import payloads as p
from streamproc.events.catalog import KINDS
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.roles import ROLES
from streamproc.runtime.fold import _payload_annotation, folds, handlers_of, kinds_of, payloads_of
from streamproc.runtime.projection import Folder, Projection, Rejection
from streamproc.runtime.projector import report
from streamproc.runtime.reactor import build
from streamproc.state import keys
from streamproc.state.store import MemoryStore
from streamproc.state.tx import Tx
from tests.samples import sample_event

ADAPTERS: set[str] = set()
"""Projections still on the untyped adapter (``kinds`` + their own ``fold``)."""


def role_projections() -> dict[str, type[Projection]]:
    made = [build(f, Configuration()) for spec in ROLES.values() for f in spec.projections]
    return {p.name: type(p) for p in made}


def test_every_projection_folds_each_kind_it_claims_through_a_typed_handler() -> None:
    found = role_projections()
    assert len(found) >= 12
    adapters = {name for name, cls in found.items() if cls.fold is not Projection.fold}
    assert adapters == ADAPTERS, "a new projection must use typed handlers (@folds)"
    catalog_types = {s.payload for s in KINDS.values()}
    for name, cls in found.items():
        assert cls.kinds <= KINDS.keys(), name
        if name in ADAPTERS:
            assert cls._folds == {}, name
            continue
        handlers = handlers_of(cls)
        assert set(handlers) == set(cls._folds) == cls.kinds, name
        assert cls.creates | cls.observes | cls.updates() <= set(handlers), name
        for kind, handler in handlers.items():
            types = handler.__folds__[0]
            assert set(types) <= catalog_types, (name, kind)
            assert KINDS[kind].payload in types, (name, kind)
            annotation = _payload_annotation(name, handler)
            assert annotation is p.Payload or KINDS[kind].payload in _members(annotation), (
                f"{name}.{handler.__name__} is annotated {annotation!r} for {kind}"
            )


def _members(annotation: object) -> set[object]:
    return set(getattr(annotation, "__args__", ())) or {annotation}


class Pauses(Projection):
    """Records which handler saw which kind, and the payload's type."""

    name: ClassVar[str] = "pauses"
    creates: ClassVar[frozenset[str]] = frozenset({"schedule.paused", "schedule.resumed"})

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, type]] = []

    @folds(p.ScheduleStateChange, kinds=("schedule.paused",))
    def _paused(self, tx: Tx, e: Envelope, s: p.ScheduleStateChange) -> None:
        self.seen.append(("paused", e.kind, type(s)))

    @folds(p.ScheduleStateChange, kinds=("schedule.resumed",))
    def _resumed(self, tx: Tx, e: Envelope, s: p.ScheduleStateChange) -> None:
        self.seen.append(("resumed", e.kind, type(s)))


def msg(seq: int, kind: str, payload: p.Payload, tenant: str = "acme") -> tuple[int, str, bytes]:
    e = new_event(kind, tenant, payload, f"{1000 + seq}:0:n", event_id=f"e{seq}")
    return seq, f"x.{seq}", encode(e)


def test_kinds_sharing_a_payload_type_reach_their_own_handler_with_the_typed_payload() -> None:
    assert Pauses.kinds == {"schedule.paused", "schedule.resumed"}
    proj = Pauses()
    s = p.ScheduleStateChange(schedule_id="s")
    Folder(MemoryStore(), [proj]).apply(
        [
            msg(1, "schedule.resumed", s),
            msg(2, "schedule.paused", s),
            msg(3, "schedule.deleted", s),
        ],
        keys.Checkpoint("S", "e", 3),
    )
    sc = p.ScheduleStateChange
    assert proj.seen == [("resumed", "schedule.resumed", sc), ("paused", "schedule.paused", sc)]


@folds(p.Window)  # a nested Struct, not the payload of any kind
def on_window(self: Projection, tx: Tx, e: Envelope, w: p.Window) -> None: ...


@folds(p.RunRequested)
def on_request(self: Projection, tx: Tx, e: Envelope, r: p.RunRequested) -> None: ...


@folds(p.RunRequested)
def on_request_again(self: Projection, tx: Tx, e: Envelope, r: p.RunRequested) -> None: ...


@folds(p.RunRequested)
def on_request_as_plan(self: Projection, tx: Tx, e: Envelope, r: p.RunPlanned) -> None: ...


@folds(p.ScheduleStateChange, kinds=("schedule.updated",))
def on_update_as_pause(self: Projection, tx: Tx, e: Envelope, s: p.ScheduleStateChange) -> None: ...


def own_fold(self: Projection, tx: Tx, event: Envelope) -> None: ...


def define(**body: object) -> type:
    """A projection class with these attributes (handlers, kinds, creates, fold)."""
    return type("Bad", (Projection,), {"name": "bad", **body})


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"_w": on_window}, "Window is not the payload of a kind in the event catalog"),
        ({"_r": on_request_as_plan}, "annotated .*RunPlanned.*, not RunRequested"),
        ({"_s": on_update_as_pause}, r"\['schedule.updated'\] do not carry ScheduleStateChange"),
        ({"_a": on_request, "_b": on_request_again}, "run.requested has two folds, _a and _b"),
        (
            {"_r": on_request, "creates": frozenset({"run.planned"})},
            r"stray \['run.planned'\]",
        ),
        ({"_r": on_request, "kinds": frozenset({"run.requested"})}, "neither declares kinds"),
        ({"_r": on_request, "fold": own_fold}, "nor overrides fold"),
        (
            {"kinds": frozenset({"run.exploded"}), "fold": own_fold},
            r"\['run.exploded'\] are not in the event catalog",
        ),
        ({"kinds": frozenset({"run.requested"})}, r"no fold for \['run.requested'\]"),
    ],
    ids=[
        "not-in-catalog",
        "wrong-annotation",
        "kind-of-another-type",
        "two-handlers",
        "claim-without-handler",
        "kinds-beside-handlers",
        "fold-beside-handlers",
        "adapter-outside-catalog",
        "kinds-without-fold",
    ],
)
def test_registration_refuses_what_does_not_fit_the_catalog(
    body: dict[str, object], match: str
) -> None:
    with pytest.raises(TypeError, match=match):
        define(**body)
    assert define(_r=on_request).kinds == {"run.requested"}  # the same, well formed


def test_payload_helpers_follow_the_catalog() -> None:
    assert kinds_of(p.ScheduleStateChange) == {
        "schedule.paused",
        "schedule.resumed",
        "schedule.deleted",
    }
    assert set(payloads_of(KINDS)) == {s.payload for s in KINDS.values()}
    assert len(payloads_of(KINDS)) == len({s.payload for s in KINDS.values()})


# ---------------------------------------------------------------- metrics outside the fold

REGISTRY = CollectorRegistry()
SEEN = Counter("test_fold_seen", "events a test fold tallied", ["tenant"], registry=REGISTRY)


class Tally(Projection):
    """Tallies every run request and refuses (after tallying) the ones named ``reject``."""

    name: ClassVar[str] = "tally"
    creates: ClassVar[frozenset[str]] = frozenset({"run.requested"})

    def __init__(self) -> None:
        self.fail_flush = False

    @folds(p.RunRequested)
    def _r(self, tx: Tx, e: Envelope, r: p.RunRequested) -> None:
        tx.count(SEEN, e.tenant)
        if r.run_id.startswith("reject"):
            raise Rejection("unknown_run", r.run_id)

    def flush(self, tx: Tx) -> None:
        if self.fail_flush:
            raise OSError("disk full")


def seen(tenant: str = "acme") -> float:
    return REGISTRY.get_sample_value("test_fold_seen_total", {"tenant": tenant}) or 0.0


def test_a_tally_counts_once_per_applied_event_after_the_commit() -> None:
    proj = Tally()
    folder = Folder(MemoryStore(), [proj], "test")
    batch = [
        msg(1, "run.requested", p.RunRequested(run_id="a", trigger="manual")),
        msg(2, "run.requested", p.RunRequested(run_id="reject-b", trigger="manual")),
        msg(3, "run.requested", p.RunRequested(run_id="c", trigger="manual"), tenant="beta"),
    ]
    proj.fail_flush = True
    with pytest.raises(OSError, match="disk full"):
        folder.apply(batch, keys.Checkpoint("S", "e", 3))
    assert (seen(), seen("beta")) == (0, 0), "a batch that did not commit counts nothing"
    proj.fail_flush = False
    folded = folder.apply(batch, keys.Checkpoint("S", "e", 3))  # the redelivery
    assert folded.counts == {(SEEN, ("acme",)): 1, (SEEN, ("beta",)): 1}, "rejected: rolled back"
    assert (seen(), seen("beta")) == (0, 0), "the fold itself counts nothing"
    report("test", folded, log_each=False)
    assert (seen(), seen("beta")) == (1, 1)
    report("test", folded, log_each=False, tallies=False)  # a rebuild of the same batch
    assert (seen(), seen("beta")) == (1, 1)


def chain_entries(tenant: str) -> float:
    sample = "scheduler_chain_entries_total"
    return DEFAULT_REGISTRY.get_sample_value(sample, {"tenant": tenant}) or 0.0


def test_chain_entries_count_each_live_event_once_and_a_replay_not_at_all() -> None:
    events = [sample_event(i, tenants=1, node="fold") for i in range(60)]
    tenant = events[0].tenant
    chained = sum(1 for e in events if e.kind in CHAINED_KINDS)
    assert chained > 0
    msgs = [(i + 1, f"x.{i}", encode(e)) for i, e in enumerate(events)]
    before = chain_entries(tenant)

    live = Folder(MemoryStore(), [AuditLog()], "auditor")
    for i in range(0, 60, 25):  # the live projector: batch by batch, counted after each commit
        chunk = msgs[i : i + 25]
        report("auditor", live.apply(chunk, keys.Checkpoint("S", "e", chunk[-1][0])))
    assert chain_entries(tenant) - before == chained

    rebuilt = Folder(MemoryStore(), [AuditLog()], "auditor")  # streamproc replay's folds
    folded = rebuilt.apply(msgs, keys.Checkpoint("S", "e", 60))
    assert folded.counts == {(metrics.CHAIN_ENTRIES, (tenant,)): chained}
    report("auditor", folded, log_each=False, tallies=False)
    assert chain_entries(tenant) - before == chained
