"""filter_subjects: the consumer filter of the kinds a role folds, from the catalog alone."""

from __future__ import annotations

import pytest

from streamproc.config import Configuration
from streamproc.events.catalog import KINDS, subject_for
from streamproc.events.filters import aggregates_of, filter_subjects
from streamproc.roles import ROLES
from streamproc.runtime.projection import folded_kinds
from streamproc.runtime.reactor import build
from tests.samples import sample_event

EVERY_AGGREGATE = sorted({s.aggregate for s in KINDS.values()})


def matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` one or more at the end."""
    pt, st = pattern.split("."), subject.split(".")
    for i, p in enumerate(pt):
        if p == ">":
            return len(st) > i
        if i >= len(st) or (p != "*" and p != st[i]):
            return False
    return len(pt) == len(st)


def test_one_aggregate_gives_its_subjects_for_every_tenant() -> None:
    assert filter_subjects("scheduler", ["image.indexed"]) == ["scheduler.events.*.image.>"]


def test_kinds_of_one_aggregate_share_its_filter() -> None:
    kinds = ["segment.started", "segment.completed", "segment.failed"]
    assert filter_subjects("p", kinds) == ["p.events.*.segment.>"]


def test_several_aggregates_are_sorted_and_distinct() -> None:
    kinds = ["verdict.recorded", "run.requested", "run.planned", "image.removed"]
    assert filter_subjects("p", kinds) == [
        "p.events.*.image.>",
        "p.events.*.run.>",
        "p.events.*.verdict.>",
    ]


def test_every_aggregate_is_the_whole_log() -> None:
    assert filter_subjects("p", KINDS) == ["p.events.>"]
    one_each = [next(k for k, s in KINDS.items() if s.aggregate == a) for a in EVERY_AGGREGATE]
    assert filter_subjects("p", one_each) == ["p.events.>"]


def test_named_tenants() -> None:
    assert filter_subjects("p", ["run.requested", "image.indexed"], ["t2", "t1"]) == [
        "p.events.t1.image.>",
        "p.events.t1.run.>",
        "p.events.t2.image.>",
        "p.events.t2.run.>",
    ]
    assert filter_subjects("p", KINDS, ["b", "a"]) == ["p.events.a.>", "p.events.b.>"]


def test_any_tenant_swallows_named_ones() -> None:
    """Filters of one consumer must not overlap: ``*`` already covers ``t1``."""
    assert filter_subjects("p", ["run.requested"], ["t1", "*"]) == ["p.events.*.run.>"]


@pytest.mark.parametrize(
    ("kinds", "tenants", "error"),
    [
        ([], ("*",), "no event kinds"),
        (["run.requested"], (), "no tenants"),
        (["run.nope"], ("*",), "not in the event catalog"),
        (["run.requested"], ("Bad.Tenant",), "tenant"),
    ],
)
def test_refused(kinds: list[str], tenants: tuple[str, ...], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        filter_subjects("p", kinds, tenants)


def test_aggregates_of() -> None:
    assert aggregates_of(["run.requested", "run.completed", "audit.snapshot"]) == {"run", "chain"}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_roles_filter_matches_exactly_the_subjects_of_kinds_it_could_fold(role: str) -> None:
    """Every event of a kind the role folds is on a subject its filter matches, and an event
    of an aggregate none of its kinds uses is not."""
    kinds = folded_kinds(build(make, Configuration()) for make in ROLES[role].projections)
    filters = filter_subjects("scheduler", kinds)
    aggregates = aggregates_of(kinds)
    for i in range(400):
        event = sample_event(i, tenants=3)
        subject = subject_for("scheduler", event.tenant, event.kind, event.payload)
        matched = any(matches(f, subject) for f in filters)
        assert matched == (KINDS[event.kind].aggregate in aggregates), (role, subject)
        if event.kind in kinds:
            assert matched


def test_the_scanner_receives_images_only() -> None:
    kinds = folded_kinds(build(make, Configuration()) for make in ROLES["scanner"].projections)
    assert filter_subjects("scheduler", kinds) == ["scheduler.events.*.image.>"]
