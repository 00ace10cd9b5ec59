"""The subjects of the event kinds a role folds: its projector consumer's filter.

A subject names its tenant and aggregate (``<prefix>.events.<tenant>.<aggregate>.<token>``),
not its kind, so a filter selects aggregates: a role that folds one kind of an aggregate
receives every kind of it (the runner folds ``segment.completed``, so it also receives
``segment.started``). A role whose kinds span every aggregate of the catalog gets the whole
log of each tenant, ``<prefix>.events.<tenant>.>`` (``<prefix>.events.>`` for every tenant):
subjects of no aggregate in the catalog then reach it too, and it quarantines what is on them.
"""

from __future__ import annotations

from collections.abc import Iterable

from streamproc.events.catalog import KINDS
from streamproc.ids import validate_tenant
from streamproc.names import EVENTS, all_of

ANY_TENANT = "*"
"""The tenant token of a filter that matches every tenant."""


def aggregates_of(kinds: Iterable[str]) -> frozenset[str]:
    """The aggregates whose subjects carry ``kinds``; a kind not in the catalog is refused."""
    kinds = frozenset(kinds)
    unknown = kinds - KINDS.keys()
    if unknown:
        raise ValueError(f"{sorted(unknown)} are not in the event catalog")
    return frozenset(KINDS[k].aggregate for k in kinds)


def filter_subjects(
    prefix: str, kinds: Iterable[str], tenants: Iterable[str] = (ANY_TENANT,)
) -> list[str]:
    """The filter subjects (sorted, none overlapping another) of the events of ``kinds`` of
    ``tenants`` (``*``: every tenant). Pure: the catalog says which aggregate carries a kind.

    Refuses no kinds (a consumer without a filter receives everything, the opposite of what
    an empty list means here) and no tenants."""
    aggregates = aggregates_of(kinds)
    if not aggregates:
        raise ValueError("no event kinds: a filter selects at least one")
    wanted = set(tenants)
    if not wanted:
        raise ValueError("no tenants: a filter selects at least one")
    if ANY_TENANT in wanted:
        wanted = {ANY_TENANT}  # every other tenant's subjects would overlap it
    else:
        for tenant in wanted:
            validate_tenant(tenant)
    every = aggregates == frozenset(s.aggregate for s in KINDS.values())
    if every and wanted == {ANY_TENANT}:
        return [all_of(prefix, EVENTS)]
    if every:
        return sorted(f"{prefix}.{EVENTS}.{t}.>" for t in wanted)
    return sorted(f"{prefix}.{EVENTS}.{t}.{a}.>" for t in wanted for a in aggregates)
