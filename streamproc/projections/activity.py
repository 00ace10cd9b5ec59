"""Per-tenant activity: how many events of each kind, and the latest HLC seen.

Small, but a real view: ``streamproc status`` reads it, and it is the projection the
foundation's exactly-once tests fold (counters are exactly what at-least-once breaks).
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from streamproc.events.catalog import KINDS
from streamproc.events.envelope import Envelope
from streamproc.events.payloads import Payload
from streamproc.hlc import sort_key
from streamproc.names import ACTIVITY
from streamproc.runtime.fold import folds, payloads_of
from streamproc.runtime.projection import Projection
from streamproc.state.store import Store
from streamproc.state.tx import Tx


class TenantActivity(msgspec.Struct):
    counts: dict[str, int] = {}
    events: int = 0
    last_hlc: str = ""
    last_event_id: str = ""


_dec = msgspec.json.Decoder(TenantActivity)
_enc = msgspec.json.Encoder(order="sorted")


class Activity(Projection):
    name: ClassVar[str] = ACTIVITY
    creates: ClassVar[frozenset[str]] = frozenset(KINDS)
    """Counters per tenant: any event is the first of its tenant's."""

    def __init__(self) -> None:
        self._cache: dict[str, TenantActivity] = {}
        self._last: dict[str, tuple[int, int, str]] = {}
        self._dirty: set[str] = set()

    @folds(*payloads_of(KINDS))
    def _event(self, tx: Tx, event: Envelope, _: Payload) -> None:
        """Every kind alike: only the envelope (tenant, kind, HLC, id) is read."""
        t = event.tenant
        act = self._cache.get(t)
        if act is None:
            raw = tx.table(self.name).get(t.encode())
            act = _dec.decode(raw) if raw is not None else TenantActivity()
            self._cache[t] = act
            self._last[t] = sort_key(act.last_hlc) if act.last_hlc else (-1, 0, "")
        act.counts[event.kind] = act.counts.get(event.kind, 0) + 1
        act.events += 1
        key = sort_key(event.hlc)
        if key > self._last[t]:
            act.last_hlc = event.hlc
            self._last[t] = key
        act.last_event_id = event.id
        self._dirty.add(t)

    def flush(self, tx: Tx) -> None:
        table = tx.table(self.name)
        for t in self._dirty:
            table.put(t.encode(), _enc.encode(self._cache[t]))
        self._dirty.clear()

    def discard(self) -> None:
        self._cache.clear()
        self._last.clear()
        self._dirty.clear()


def read_all(store: object) -> dict[str, TenantActivity]:
    assert isinstance(store, Store)
    return {k.decode(): _dec.decode(v) for k, v in store.scan(Activity.name)}
