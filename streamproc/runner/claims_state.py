"""The runner's VEX claims: every ``export.vexer``'s changed claims, folded per tenant and
vulnerability, with the log position each took effect at.

Consistency rule (docs/vex.md, "Which claims a verdict applies"): a run applies the claims
of every ``export.vexer`` recorded *before its* ``run.requested``, whatever the runner has
folded by the time it evaluates an image. A claim that arrives while a run is under way is
the next run's business — its own export plans one. So a verdict is a function of the
scanner's answer and the log up to its run's request, and a replay decides the same.

For that a claim keeps its history while runs that may need an older value are open: each
entry says at which sequence it took effect, an update drops the entries no open run of the
tenant can still see, and each tenant's open runs' positions are kept here (``w`` keys).
Positions are kept only once the tenant has claims (``n`` key): a run requested before its
first claim sees none, and a tenant without VEX leaves no trace here.
"""

from __future__ import annotations

import bisect
from typing import ClassVar

import msgspec

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope
from streamproc.names import RUNNER_VEX
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection
from streamproc.sbom.purls import PurlError, normalize_purl
from streamproc.state.store import Store
from streamproc.state.tx import Tx

CF = RUNNER_VEX
SEP = b"\x00"
_CLAIMS, _RUN, _OPEN, _HAS = b"c", b"r", b"w", b"n"
"""``c`` tenant, vuln → claim entries; ``r`` tenant, run → the run's position; ``w`` tenant →
the positions of its open runs (sorted); ``n`` tenant: it has had claims."""


class Entry(msgspec.Struct, array_like=True, frozen=True):
    """One value of one document's claim on (purl, vuln, image), from ``seq`` on."""

    document: str
    purl: str
    image: str
    seq: int
    status: str
    """The claim's status; empty: the document dropped it."""
    justification: str | None = None
    version: str | None = None
    """The document's version that made it (when the export says)."""

    @property
    def ident(self) -> tuple[str, str, str]:
        return (self.document, self.purl, self.image)


_enc = msgspec.msgpack.Encoder()
_entries = msgspec.msgpack.Decoder(list[Entry]).decode
_ints = msgspec.msgpack.Decoder(list[int]).decode


def claims_key(tenant: str, vuln: str) -> bytes:
    return _CLAIMS + tenant.encode() + SEP + vuln.encode()


def _run_key(tenant: str, run_id: str) -> bytes:
    return _RUN + tenant.encode() + SEP + run_id.encode()


def prune(entries: list[Entry], watermark: int | None) -> list[Entry]:
    """Drop what no reader can see: of one claim's values, those superseded by a newer one
    that took effect before ``watermark`` (the oldest open run's position; None: no run
    is open, so only the newest value is ever read again)."""
    out: list[Entry] = []
    by: dict[tuple[str, str, str], list[Entry]] = {}
    for e in entries:
        by.setdefault(e.ident, []).append(e)
    for values in by.values():
        values.sort(key=lambda e: e.seq)
        if watermark is None:
            keep = values[-1:]
        else:
            before = [e for e in values if e.seq < watermark]
            keep = before[-1:] + [e for e in values if e.seq >= watermark]
        while keep and not keep[0].status:  # a drop with nothing older beneath it: no claim
            keep.pop(0)
        out.extend(keep)
    out.sort(key=lambda e: (e.seq, e.ident))
    return out


class VexClaims(Projection):
    name: ClassVar[str] = RUNNER_VEX
    creates: ClassVar[frozenset[str]] = frozenset({"export.vexer", "run.requested"})
    observes: ClassVar[frozenset[str]] = frozenset({"run.completed", "run.cancelled"})
    version: ClassVar[int] = 1

    # ------------------------------------------------------------------ claims

    @folds(p.VexerExport)
    def _export(self, tx: Tx, e: Envelope, x: p.VexerExport) -> None:
        t = tx.table(CF)
        versions = {d.document_id: d.version for d in x.documents or ()}
        own = x.source or "vexer"
        wm = self._open(tx, e.tenant)
        watermark = wm[0] if wm else None
        changed: dict[bytes, list[Entry]] = {}
        for c in x.changed_claims:
            try:
                purl = normalize_purl(c.product_key).purl
            except PurlError:
                continue  # a claim on no parseable package matches no finding
            doc = c.document_id or own
            entry = Entry(
                doc,
                purl,
                c.image_digest or "",
                tx.seq,
                "" if c.removed else c.after,
                c.justification or None,
                versions.get(doc),
            )
            k = claims_key(e.tenant, c.vuln_id)
            held = changed.get(k)
            if held is None:
                raw = t.get(k)
                held = changed[k] = _entries(raw) if raw is not None else []
            held.append(entry)
        for k, entries in changed.items():
            kept = prune(entries, watermark)
            if kept:
                t.put(k, _enc.encode(kept))
            else:
                t.delete(k)
        if changed:
            t.put(_HAS + e.tenant.encode(), b"")

    # ------------------------------------------------------------------ runs' positions

    def _open(self, tx: Tx, tenant: str) -> list[int]:
        raw = tx.table(CF).get(_OPEN + tenant.encode())
        return _ints(raw) if raw is not None else []

    @folds(p.RunRequested)
    def _requested(self, tx: Tx, e: Envelope, r: p.RunRequested) -> None:
        t = tx.table(CF)
        if t.get(_HAS + e.tenant.encode()) is None:
            return  # no claims yet: the run sees none (``as_of`` 0)
        rk = _run_key(e.tenant, r.run_id)
        if t.get(rk) is not None:
            raise Rejection("run_exists", f"run {r.run_id} was already requested")
        t.put(rk, b"%d" % tx.seq)
        wm = self._open(tx, e.tenant)
        bisect.insort(wm, tx.seq)
        t.put(_OPEN + e.tenant.encode(), _enc.encode(wm))

    @folds(p.RunCompleted, p.RunCancelled)
    def _ended(self, tx: Tx, e: Envelope, r: p.RunCompleted | p.RunCancelled) -> None:
        t = tx.table(CF)
        raw = t.get(_run_key(e.tenant, r.run_id))
        if raw is None or raw.startswith(b"-"):
            return  # unknown here, or already ended
        seq = int(raw)
        t.put(_run_key(e.tenant, r.run_id), b"-%d" % seq)
        wm = self._open(tx, e.tenant)
        i = bisect.bisect_left(wm, seq)
        if i < len(wm) and wm[i] == seq:
            del wm[i]
        t.put(_OPEN + e.tenant.encode(), _enc.encode(wm))


class ClaimsReader:
    """Reads of committed claims for the segment workers (never inside a fold)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def as_of(self, tenant: str, run_id: str) -> int:
        """The position a run's claims are read at: its ``run.requested``'s sequence (0 for
        a run requested before its tenant had any claim)."""
        raw = self.store.get(CF, _run_key(tenant, run_id))
        return abs(int(raw)) if raw is not None else 0

    def entries(self, tenant: str, vuln: str) -> list[Entry]:
        raw = self.store.get(CF, claims_key(tenant, vuln))
        return _entries(raw) if raw is not None else []
