"""Image records: what the index keeps per image id to undo exactly what it added.

The input is an :class:`~streamproc.sbom.image.IndexedImage` (purls, product keys and
usage flags aligned, owners). :class:`ImageRecord` is what the index keeps per image id to
undo exactly that later (re-index, removal): the owners and the product groups the image is
in. It does not repeat the purls: the groups' own chunk of that id says which exact purls
hold it, so a record stays ~1 KB instead of ~30 KB and a batch of 1,000 images writes
~1 MB, not 30 MB.
"""

from __future__ import annotations

import msgspec

__all__ = ["ImageRecord", "decode_record", "encode_record"]


class ImageRecord(msgspec.Struct, array_like=True, frozen=True):
    """Stored per image id: its owners, its product groups (sorted group ids) and whether
    its usage is known (it is then in the tenant's usage-known owner bitmap)."""

    tenant: str
    digest: str
    registry: str
    repo: str
    namespace: str
    tags: list[str]
    labels: dict[str, str]
    gids: list[int]
    usage_known: bool


_record_enc = msgspec.msgpack.Encoder(order="deterministic")
_record_dec = msgspec.msgpack.Decoder(ImageRecord)


def encode_record(rec: ImageRecord) -> bytes:
    return _record_enc.encode(rec)


def decode_record(raw: bytes) -> ImageRecord:
    return _record_dec.decode(raw)
