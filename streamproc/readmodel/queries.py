"""Reading the read model: point lookups and paged, tenant-prefixed listings.

Every listing scans only ``tenant + NUL``; cursors are key suffixes within that prefix, so
no request can page into another tenant's keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import msgspec

from streamproc.readmodel import keys, run_exports
from streamproc.readmodel.acks import CF as ACKS_CF
from streamproc.readmodel.acks import AckRecord, ack_key, decode_ack
from streamproc.readmodel.exports import CF as EXPORTS_CF
from streamproc.readmodel.exports import export_key
from streamproc.readmodel.images import CF as IMAGES_CF
from streamproc.readmodel.images import ImageSummary, decode_image, image_key
from streamproc.readmodel.records import (
    BacklogRecord,
    CursorRecord,
    DeltaRecord,
    ExportItem,
    ExportRecord,
    RunRecord,
    ScheduleRecord,
    decode_backlog,
    decode_cursor,
    decode_delta,
    decode_export,
    decode_export_item,
    decode_run,
    decode_schedule,
)
from streamproc.readmodel.runs import BACKLOG_CF, BY_TIME_CF, DELTAS_CF, delta_prefix, run_key
from streamproc.readmodel.runs import CF as RUNS_CF
from streamproc.readmodel.schedules import CF as SCHEDULES_CF
from streamproc.state import keys as state_keys
from streamproc.state.store import Store

T = TypeVar("T")
SCAN_BUDGET = 10_000
"""Index entries a filtered listing examines per page before it returns a cursor."""


@dataclass
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None
    prefix: bytes = b""
    item_keys: list[bytes] = field(default_factory=list)
    """The key each item was read at: a page cut short continues after one of them."""

    def cursor_after(self, i: int) -> str:
        """The cursor of a page that ends with item ``i``."""
        return keys.encode_cursor(self.prefix, self.item_keys[i])


class ReadModel:
    """Queries over a store the read-model projections write (the gateway role's store)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ------------------------------------------------------------------ schedules

    def schedule(self, tenant: str, schedule_id: str) -> ScheduleRecord | None:
        raw = self.store.get(SCHEDULES_CF, keys.key(tenant, schedule_id))
        return decode_schedule(raw) if raw is not None else None

    def schedules(
        self,
        tenant: str,
        *,
        limit: int,
        cursor: str | None = None,
        include_deleted: bool = False,
        paused: bool | None = None,
    ) -> Page[ScheduleRecord]:
        def keep(r: ScheduleRecord) -> bool:
            return (include_deleted or not r.deleted) and (paused is None or r.paused == paused)

        prefix = keys.tenant_prefix(tenant)
        return _page(
            self.store.scan(SCHEDULES_CF, prefix, keys.decode_cursor(prefix, cursor)),
            prefix,
            limit,
            lambda _k, v: decode_schedule(v),
            keep,
        )

    # ------------------------------------------------------------------ runs

    def run(self, tenant: str, run_id: str) -> RunRecord | None:
        raw = self.store.get(RUNS_CF, run_key(tenant, run_id))
        return decode_run(raw) if raw is not None else None

    def runs(
        self,
        tenant: str,
        *,
        limit: int,
        cursor: str | None = None,
        states: frozenset[str] = frozenset(),
        triggers: frozenset[str] = frozenset(),
    ) -> Page[RunRecord]:
        """Newest first (by the stream sequence of ``run.requested``)."""
        prefix = keys.tenant_prefix(tenant)

        def load(k: bytes, _v: bytes) -> RunRecord | None:
            return self.run(tenant, k[len(prefix) + 8 :].decode())

        def keep(r: RunRecord | None) -> bool:
            return (
                r is not None
                and (not states or r.state in states)
                and (not triggers or r.trigger in triggers)
            )

        page = _page(
            self.store.scan(BY_TIME_CF, prefix, keys.decode_cursor(prefix, cursor)),
            prefix,
            limit,
            load,
            keep,
        )
        return Page(
            [r for r in page.items if r is not None], page.next_cursor, prefix, page.item_keys
        )

    def deltas(
        self, tenant: str, run_id: str, *, limit: int, cursor: str | None = None
    ) -> Page[DeltaRecord]:
        prefix = delta_prefix(tenant, run_id)
        return _page(
            self.store.scan(DELTAS_CF, prefix, keys.decode_cursor(prefix, cursor)),
            prefix,
            limit,
            lambda _k, v: decode_delta(v),
            lambda _r: True,
        )

    def delta(self, tenant: str, run_id: str, digest: str) -> DeltaRecord | None:
        raw = self.store.get(DELTAS_CF, delta_prefix(tenant, run_id) + digest.encode())
        return decode_delta(raw) if raw is not None else None

    def acknowledgement(self, tenant: str, run_id: str, digest: str) -> AckRecord | None:
        """Who took charge of the image's delta in the run (None: nobody yet)."""
        raw = self.store.get(ACKS_CF, ack_key(tenant, run_id, digest))
        return decode_ack(raw) if raw is not None else None

    def acknowledgements(
        self, tenant: str, run_id: str, digests: list[str]
    ) -> dict[str, AckRecord]:
        """The acknowledgements of these images' deltas in the run, read in one call (a page
        of deltas)."""
        raws = self.store.get_many(ACKS_CF, [ack_key(tenant, run_id, d) for d in digests])
        return {d: decode_ack(raw) for d, raw in zip(digests, raws, strict=True) if raw}

    def backlog(self, tenant: str) -> list[BacklogRecord]:
        """Work spilled to the next window and not yet requested as a continuation."""
        prefix = keys.tenant_prefix(tenant)
        out = []
        for examined, (_, v) in enumerate(self.store.scan(BACKLOG_CF, prefix), 1):
            entry = decode_backlog(v)
            if not entry.requested:
                out.append(entry)
            if examined >= SCAN_BUDGET:
                break
        return sorted(out, key=lambda b: (b.planned_ms, b.run_id))

    def run_exports(
        self, tenant: str, run_id: str, *, limit: int, cursor: str | None = None
    ) -> Page[ExportItem]:
        """The exports a run covers, in the order they were recorded."""
        prefix = run_exports.items_prefix(tenant, run_id)
        return _page(
            self.store.scan(run_exports.ITEMS_CF, prefix, keys.decode_cursor(prefix, cursor)),
            prefix,
            limit,
            lambda _k, v: decode_export_item(v),
            lambda _r: True,
        )

    def impact_cursor(self, tenant: str) -> CursorRecord:
        raw = self.store.get(run_exports.CURSORS_CF, run_exports.cursor_key(tenant))
        return decode_cursor(raw) if raw is not None else CursorRecord()

    # ------------------------------------------------------------------ images

    def image(self, tenant: str, digest: str) -> ImageSummary | None:
        raw = self.store.get(IMAGES_CF, image_key(tenant, digest))
        return decode_image(raw) if raw is not None else None

    def images(
        self,
        tenant: str,
        *,
        limit: int,
        cursor: str | None = None,
        repository: str | None = None,
        namespace: str | None = None,
    ) -> Page[ImageSummary]:
        """By digest; ``repository`` matches ``org/app`` or ``registry/org/app``."""

        def keep(r: ImageSummary) -> bool:
            return (
                repository is None or repository in (r.repository, f"{r.registry}/{r.repository}")
            ) and (namespace is None or r.namespace == namespace)

        prefix = keys.tenant_prefix(tenant)
        return _page(
            self.store.scan(IMAGES_CF, prefix, keys.decode_cursor(prefix, cursor)),
            prefix,
            limit,
            lambda _k, v: decode_image(v),
            keep,
        )

    # ------------------------------------------------------------------ exports, rejections

    def export(self, tenant: str, kind: str, export_id: str) -> ExportRecord | None:
        raw = self.store.get(EXPORTS_CF, export_key(tenant, kind, export_id))
        return decode_export(raw) if raw is not None else None

    def rejection(self, seq: int, projection: str) -> state_keys.Rejected | None:
        """Why the event at ``seq`` did not apply to ``projection`` (None if it applied)."""
        raw = self.store.get(
            state_keys.META_CF,
            state_keys.seq_key(state_keys.REJECTION_PREFIX, seq) + projection.encode(),
        )
        return None if raw is None else msgspec.json.decode(raw, type=state_keys.Rejected)


def _page(
    items: Iterator[tuple[bytes, bytes]],
    prefix: bytes,
    limit: int,
    load: Callable[[bytes, bytes], T],
    keep: Callable[[T], bool],
) -> Page[T]:
    out: list[T] = []
    at: list[bytes] = []
    last = b""
    for examined, (k, v) in enumerate(items, 1):
        last = k
        rec = load(k, v)
        if keep(rec):
            out.append(rec)
            at.append(k)
            if len(out) >= limit:
                break
        if examined >= SCAN_BUDGET:
            break
    else:
        return Page(out, None, prefix, at)
    return Page(out, keys.encode_cursor(prefix, last), prefix, at)
