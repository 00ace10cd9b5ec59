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

import hashlib
from typing import ClassVar

import msgspec

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import ImageIndexed, ImageRemoved
from streamproc.names import SCANNER_IMAGES
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection
from streamproc.state.tx import Table, Tx

CF = SCANNER_IMAGES

SEP = b"\x00"


class ImageEntry(msgspec.Struct, array_like=True, frozen=True):
    sbom_key: str


class SbomEntry(msgspec.Struct, array_like=True, frozen=True):
    images: int
    purls: list[str]


_enc = msgspec.msgpack.Encoder()
image_entry = msgspec.msgpack.Decoder(ImageEntry)
sbom_entry = msgspec.msgpack.Decoder(SbomEntry)


def sbom_key(purls: list[str]) -> str:
    """Content key of a sorted purl list (the same as the scanner's ``POST /sboms``)."""
    return "sha256:" + hashlib.sha256("\n".join(purls).encode()).hexdigest()


def image_key(tenant: str, digest: str) -> bytes:
    return b"i" + tenant.encode() + SEP + digest.encode()


def digest_key(tenant: str, digest: str) -> bytes:
    return b"d" + digest.encode() + SEP + tenant.encode()


def stored_sbom_key(key: str) -> bytes:
    return b"s" + key.encode()


class ScannerImages(Projection):
    name: ClassVar[str] = CF
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
            prev = image_entry.decode(old).sbom_key
            if prev == key:
                return  # same packages: nothing to change
            self._release(t, prev)
        raw = t.get(stored_sbom_key(key))
        have = sbom_entry.decode(raw) if raw is not None else SbomEntry(0, purls)
        t.put(stored_sbom_key(key), _enc.encode(SbomEntry(have.images + 1, have.purls)))
        t.put(ik, _enc.encode(ImageEntry(key)))
        t.put(digest_key(tenant, pl.digest), b"")

    @folds(ImageRemoved)
    def _removed(self, tx: Tx, event: Envelope, pl: ImageRemoved) -> None:
        t = tx.table(CF)
        tenant = event.tenant
        ik = image_key(tenant, pl.digest)
        old = t.get(ik)
        if old is None:
            raise Rejection("image_not_indexed", f"image {pl.digest} of tenant {tenant}")
        self._release(t, image_entry.decode(old).sbom_key)
        t.delete(ik)
        t.delete(digest_key(tenant, pl.digest))

    @staticmethod
    def _release(t: Table, key: str) -> None:
        """One image less uses the SBOM; the last one takes it along."""
        raw = t.get(stored_sbom_key(key))
        if raw is None:
            return
        have = sbom_entry.decode(raw)
        if have.images <= 1:
            t.delete(stored_sbom_key(key))
        else:
            t.put(stored_sbom_key(key), _enc.encode(SbomEntry(have.images - 1, have.purls)))
