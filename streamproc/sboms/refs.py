"""How many images use each stored SBOM, and since when an SBOM is used by none: a pure
fold of ``image.indexed``, ``image.removed`` and ``sbom.deleted``, in the planner's state.

An SBOM is named by the SHA-256 of its bytes, so images of any tenant that sent the same
document share one stored object: the count is over every tenant's images. When it drops to
zero the SBOM is *released*: the release records the event that did it (its id, tenant and
HLC time), and the retention reactor deletes the object once ``sboms.retention_s`` has
passed since then (:mod:`streamproc.sboms.retention`). An image indexed with it again
before that takes the release back; ``sbom.deleted`` ends it.

Keys of the column family:

| key | value |
|---|---|
| ``i<tenant>\\0<digest>`` | the image's SBOM name (empty: indexed without one) |
| ``n<name>`` | how many images use it (ASCII decimal) |
| ``r<name>`` | its release: ``{at, tenant, by}`` (JSON) |
| ``q<at: 8 bytes big-endian><name>`` | (empty) the releases in time order, for the deleter |
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, NamedTuple

import msgspec

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import ImageIndexed, ImageRemoved, SbomDeleted
from streamproc.hlc import Timestamp
from streamproc.names import SBOM_REFS_CF
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection
from streamproc.state.store import Store
from streamproc.state.tx import Table, Tx

CF = SBOM_REFS_CF


class Release(msgspec.Struct, frozen=True):
    at: int
    """HLC physical time (ms) of the event that removed the SBOM's last use."""
    tenant: str
    by: str
    """That event's id."""


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(Release)


def _image(tenant: str, digest: str) -> bytes:
    return b"i" + f"{tenant}\x00{digest}".encode()


def _count(name: str) -> bytes:
    return b"n" + name.encode()


def _release(name: str) -> bytes:
    return b"r" + name.encode()


def _queued(at: int, name: str) -> bytes:
    return b"q" + at.to_bytes(8, "big") + name.encode()


class SbomRefs(Projection):
    name: ClassVar[str] = SBOM_REFS_CF
    creates: ClassVar[frozenset[str]] = frozenset({"image.indexed"})
    families: ClassVar[tuple[str, ...]] = (CF,)

    @folds(ImageIndexed)
    def _indexed(self, tx: Tx, event: Envelope, p: ImageIndexed) -> None:
        t = tx.table(CF)
        key = _image(event.tenant, p.digest)
        old = t.get(key)
        new = (p.sbom or "").encode()
        if old == new:
            return  # indexed again with the same SBOM (or again without one)
        if new:
            _use(t, p.sbom or "")
        if old:
            _unuse(t, old.decode(), event)
        t.put(key, new)

    @folds(ImageRemoved)
    def _removed(self, tx: Tx, event: Envelope, p: ImageRemoved) -> None:
        t = tx.table(CF)
        key = _image(event.tenant, p.digest)
        old = t.get(key)
        if old is None:
            raise Rejection(
                "image_not_indexed", f"image {p.digest} of tenant {event.tenant} is not indexed"
            )
        if old:
            _unuse(t, old.decode(), event)
        t.delete(key)

    @folds(SbomDeleted)
    def _deleted(self, tx: Tx, event: Envelope, p: SbomDeleted) -> None:
        t = tx.table(CF)
        raw = t.get(_release(p.sbom))
        if raw is None or _dec.decode(raw).by != p.released_by:
            raise Rejection(
                "sbom_not_released",
                f"SBOM {p.sbom} is in use again, or released by another event than {p.released_by}",
            )
        rel = _dec.decode(raw)
        t.delete(_release(p.sbom))
        t.delete(_queued(rel.at, p.sbom))


def _use(t: Table, name: str) -> None:
    raw = t.get(_release(name))
    if raw is not None:  # used again before it was deleted: the release is taken back
        t.delete(_release(name))
        t.delete(_queued(_dec.decode(raw).at, name))
    n = t.get(_count(name))
    t.put(_count(name), str(int(n or b"0") + 1).encode())


def _unuse(t: Table, name: str, event: Envelope) -> None:
    n = int(t.get(_count(name)) or b"1") - 1
    if n > 0:
        t.put(_count(name), str(n).encode())
        return
    t.delete(_count(name))
    at = Timestamp.parse(event.hlc).physical
    t.put(_release(name), _enc.encode(Release(at, event.tenant, event.id)))
    t.put(_queued(at, name), b"")


# ------------------------------------------------------------------ reading committed state


class Released(NamedTuple):
    name: str
    release: Release


def released_before(store: Store, at_ms: int) -> Iterator[Released]:
    """The SBOMs no image uses, released at or before ``at_ms``, oldest release first."""
    for key, _ in store.scan(CF, b"q"):
        at = int.from_bytes(key[1:9], "big")
        if at > at_ms:
            return
        name = key[9:].decode()
        raw = store.get(CF, _release(name))
        if raw is not None:
            yield Released(name, _dec.decode(raw))


def known(store: Store, name: str) -> bool:
    """Whether an image uses ``name`` or its release is pending: what the fold knows of it."""
    return store.get(CF, _count(name)) is not None or store.get(CF, _release(name)) is not None


def users(store: Store, name: str) -> int:
    """How many images use ``name`` (committed state)."""
    return int(store.get(CF, _count(name)) or b"0")
