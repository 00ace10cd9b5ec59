"""The HLC log view against the chain: one row per entry, at the entry's HLC.

The view is a derived index — snapshots attest the chain, not the view — so this check is
optional in ``chain verify`` (``--log-view``) and always on in the auditor. It compares
multisets (sums of 64-bit hashes, stable across processes) and locates rows only after a
mismatch.
"""

from __future__ import annotations

import hashlib
import threading

from streamproc.audit.entry import entry_decoder
from streamproc.audit.layout import (
    CHAIN_CF,
    LOG_CF,
    Readable,
    entry_at,
    hlc_key,
    pos_bytes,
    tenant_prefix,
)
from streamproc.audit.segment import MASK, BrokenAt, Cancelled


def log_view_rows(
    store: Readable, tenant: str, n: int, stop: threading.Event | None = None
) -> tuple[int, int]:
    """(rows, multiset hash) of the log view's rows that point below position ``n``."""
    prefix = tenant_prefix(tenant)
    plen = len(prefix)
    blake = hashlib.blake2b
    acc = rows = 0
    for key, _ in store.scan(LOG_CF, prefix):
        if int.from_bytes(key[-8:], "big") < n:
            acc += int.from_bytes(blake(key[plen:], digest_size=8).digest(), "big")
            rows += 1
            if not rows & 0xFFF and stop is not None and stop.is_set():
                raise Cancelled()
    return rows, acc & MASK


def check_log_view(
    store: Readable,
    tenant: str,
    n: int,
    expected: int,
    stop: threading.Event | None,
    rows: tuple[int, int] | None,
) -> None:
    """The HLC log view must hold exactly one row per entry, at the entry's HLC: compared as
    multisets (a sum of hashes), and only located row by row after a mismatch."""
    if rows is None:
        rows = log_view_rows(store, tenant, n, stop)
    if rows != (n, expected):
        _locate_log_error(store, tenant, n)


def _locate_log_error(store: Readable, tenant: str, n: int) -> None:
    """Slow path, only after a mismatch: the first entry without its row, else the first row
    that belongs to no entry."""
    prefix = tenant_prefix(tenant)
    plen = len(prefix)
    for _, raw in store.scan(CHAIN_CF, prefix):
        e = entry_decoder.decode(raw)
        if e.position >= n:
            break
        if store.get(LOG_CF, prefix + hlc_key(e.t_hlc) + pos_bytes(e.position)) is None:
            raise BrokenAt(
                e.position,
                "log_index",
                e.t_hlc,
                None,
                "the HLC log view has no row for this entry at its HLC",
            )
    for key, _ in store.scan(LOG_CF, prefix):
        position = int.from_bytes(key[-8:], "big")
        at = entry_at(store, tenant, position) if position < n else None
        if position < n and (at is None or hlc_key(at.t_hlc) != key[plen:-8]):
            raise BrokenAt(position, "log_index", None, key.hex(), "extra row in the log view")
