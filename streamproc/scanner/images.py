"""What the reference scanner knows of images: every image the index knows, folded from
``image.indexed`` / ``image.removed`` on the event log, by (tenant, image digest).

A real scanner keeps the SBOMs it evaluates in its own store; this one builds that store
from the same events the impact index folds, so nothing is uploaded twice and nothing is
forgotten across restarts: the ``scanner`` role's state directory holds it, committed with
its checkpoint like every projection (``streamproc replay --role scanner`` rebuilds it).

Column family ``scanner_images``::

    i<tenant>\\0<digest>   msgpack ImageEntry: the image's SBOM key (and nothing else)
    d<digest>\\0<tenant>   empty: the tenants that have the digest (for calls without one)
    s<sbom key>           msgpack SbomEntry: how many images use it, their sorted purls

The SBOM key is ``sha256:`` of the image's sorted purls joined by newlines (what
``POST /sboms`` answers), so images with the same packages share one stored list.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import msgspec

from streamproc.bus import jsapi
from streamproc.events.envelope import Envelope
from streamproc.events.payloads import ImageIndexed, ImageRemoved
from streamproc.fold import folds
from streamproc.projection import Projection, Rejection, Table, Tx
from streamproc.reactor import RoleSpec
from streamproc.state.store import Store

CF = "scanner_images"
_SEP = b"\x00"


class ImageEntry(msgspec.Struct, array_like=True, frozen=True):
    sbom_key: str


class SbomEntry(msgspec.Struct, array_like=True, frozen=True):
    images: int
    purls: list[str]


_enc = msgspec.msgpack.Encoder()
_image = msgspec.msgpack.Decoder(ImageEntry)
_sbom = msgspec.msgpack.Decoder(SbomEntry)


def sbom_key(purls: list[str]) -> str:
    """Content key of a sorted purl list (the same as the scanner's ``POST /sboms``)."""
    return "sha256:" + hashlib.sha256("\n".join(purls).encode()).hexdigest()


def image_key(tenant: str, digest: str) -> bytes:
    return b"i" + tenant.encode() + _SEP + digest.encode()


def _digest_key(tenant: str, digest: str) -> bytes:
    return b"d" + digest.encode() + _SEP + tenant.encode()


def _sbom_key(key: str) -> bytes:
    return b"s" + key.encode()


class ScannerImages(Projection):
    name: ClassVar[str] = "scanner_images"
    creates: ClassVar[frozenset[str]] = frozenset({"image.indexed"})
    families: ClassVar[tuple[str, ...]] = (CF,)

    @folds(ImageIndexed)
    def _indexed(self, tx: Tx, event: Envelope, pl: ImageIndexed) -> None:
        t = tx.table(CF)
        tenant = event.tenant
        ik = image_key(tenant, pl.digest)
        old = t.get(ik)
        purls = sorted({c.purl for c in pl.components})
        key = sbom_key(purls)
        if old is not None:
            prev = _image.decode(old).sbom_key
            if prev == key:
                return  # same packages: nothing to change
            self._release(t, prev)
        raw = t.get(_sbom_key(key))
        have = _sbom.decode(raw) if raw is not None else SbomEntry(0, purls)
        t.put(_sbom_key(key), _enc.encode(SbomEntry(have.images + 1, have.purls)))
        t.put(ik, _enc.encode(ImageEntry(key)))
        t.put(_digest_key(tenant, pl.digest), b"")

    @folds(ImageRemoved)
    def _removed(self, tx: Tx, event: Envelope, pl: ImageRemoved) -> None:
        t = tx.table(CF)
        tenant = event.tenant
        ik = image_key(tenant, pl.digest)
        old = t.get(ik)
        if old is None:
            raise Rejection("image_not_indexed", f"image {pl.digest} of tenant {tenant}")
        self._release(t, _image.decode(old).sbom_key)
        t.delete(ik)
        t.delete(_digest_key(tenant, pl.digest))

    @staticmethod
    def _release(t: Table, key: str) -> None:
        """One image less uses the SBOM; the last one takes it along."""
        raw = t.get(_sbom_key(key))
        if raw is None:
            return
        have = _sbom.decode(raw)
        if have.images <= 1:
            t.delete(_sbom_key(key))
        else:
            t.put(_sbom_key(key), _enc.encode(SbomEntry(have.images - 1, have.purls)))


SCANNER = RoleSpec([ScannerImages])
"""The ``scanner`` role: the reference scanner's catalog (no reactors, no routes: the
scanner serves its own HTTP API on its own port)."""


class IndexedImages:
    """Reads of the folded catalog for the scanner's handlers (committed state only), and
    a way to wait until the log's head is folded."""

    def __init__(
        self, store: Store, catch_up: Callable[[float], Awaitable[None]] | None = None
    ) -> None:
        self.store = store
        self._catch_up = catch_up

    @classmethod
    def of(cls, system: Any, role: str = "scanner") -> IndexedImages:
        """The catalog of a :class:`~streamproc.app.System` that hosts the scanner role."""
        proj = system.projectors[role]
        store = system.stores[system.roles.index(role)]
        stream = system.settings.events_stream

        async def catch_up(timeout: float) -> None:
            info = await jsapi.stream_info(system.nc, stream)
            if info is not None and info.state.last_seq > proj.applied:
                await proj.wait_for(info.state.last_seq, timeout)

        return cls(store, catch_up)

    def sbom_of(self, tenant: str | None, digest: str) -> str | None:
        """The image's SBOM key; without a tenant, that of the first tenant holding the
        digest (a digest names one content, whoever indexed it)."""
        if tenant is not None:
            raw = self.store.get(CF, image_key(tenant, digest))
            return None if raw is None else _image.decode(raw).sbom_key
        prefix = b"d" + digest.encode() + _SEP
        for k, _ in self.store.scan(CF, prefix):
            return self.sbom_of(k[len(prefix) :].decode(), digest)
        return None

    def purls(self, key: str) -> list[str] | None:
        raw = self.store.get(CF, _sbom_key(key))
        return None if raw is None else _sbom.decode(raw).purls

    def count(self) -> int:
        return sum(1 for _ in self.store.scan(CF, b"i"))

    async def catch_up(self, timeout: float) -> None:
        """Until what is on the log now is folded: a miss may be an image indexed a
        moment ago. Gives up quietly after ``timeout`` (the caller answers 404)."""
        if self._catch_up is not None:
            with contextlib.suppress(TimeoutError):
                await self._catch_up(timeout)
