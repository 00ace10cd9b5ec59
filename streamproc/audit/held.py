"""Entries held back for clock skew: chained, but not attested while they are from the future.

A fold cannot read a clock, so the chain itself is a pure function of the log and includes
every event in commit order. What the skew check governs is the auditor's *signed statement*:
an entry whose HLC physical time is more than ``max_clock_skew`` ahead of the auditor's clock
is held — no snapshot covers it (or anything after it) and the auditor's clock does not merge
it — until that clock has caught up. Holding is decided at the moment of signing, by whoever
holds the clock; the HLC-ordered log view makes the check a range scan ("every entry after
now + skew"), so it costs nothing while nothing is held.
"""

from __future__ import annotations

import msgspec

from streamproc.audit.layout import Readable, entry_at, log_view, read_head


class HeldEntry(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    t_hlc: str
    ahead_ms: int
    """How far the entry's physical time is ahead of the clock it was compared with."""
    job_id: str
    action: str
    kind: str
    event_id: str
    chain_link: str


class HeldView(msgspec.Struct, kw_only=True):
    tenant: str
    now_ms: int
    max_clock_skew_ms: int
    entries: int
    """Chain length."""
    attested: int
    """Positions ``0 .. attested-1`` are covered by signed snapshots."""
    held: list[HeldEntry]
    waiting: int
    """Entries that cannot be snapshotted until the first held one is released."""


def held_positions(
    store: Readable, tenant: str, frontier: int, now_ms: int, max_skew_ms: int
) -> list[tuple[int, str]]:
    """``(position, t_hlc)`` of unattested entries (position >= ``frontier``) whose physical
    time is more than ``max_skew_ms`` ahead of ``now_ms``, in chain order."""
    found = [
        (item.position, item.t_hlc)
        for item in log_view(store, tenant, after_physical=now_ms + max_skew_ms)
        if item.position >= frontier
    ]
    found.sort()
    return found


def held_view(store: Readable, tenant: str, now_ms: int, max_skew_ms: int) -> HeldView | None:
    """What the operator sees for one tenant (None: the tenant has no chain)."""
    head = read_head(store, tenant)
    if head is None:
        return None
    held: list[HeldEntry] = []
    for position, t_hlc in held_positions(store, tenant, head.snapshotted, now_ms, max_skew_ms):
        e = entry_at(store, tenant, position)
        if e is None:
            continue
        physical = int(t_hlc.split(":", 1)[0])
        held.append(
            HeldEntry(
                position=position,
                t_hlc=t_hlc,
                ahead_ms=physical - now_ms,
                job_id=e.job_id,
                action=e.action,
                kind=e.kind,
                event_id=e.event_id,
                chain_link=e.chain_link,
            )
        )
    return HeldView(
        tenant=tenant,
        now_ms=now_ms,
        max_clock_skew_ms=max_skew_ms,
        entries=head.entries,
        attested=head.snapshotted,
        held=held,
        waiting=head.entries - held[0].position if held else 0,
    )
