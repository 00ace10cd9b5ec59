"""Storage layout of the impact index: column families, keys and value codecs.

Why this shape: a RocksDB write costs ~2 µs per value plus ~7 ns per byte through the
store, and the bitmaps must be rewritten in the batch that changes them (same WriteBatch as
the checkpoint). One value per bitmap would mean ~240 values per indexed image; one value
per whole product would rewrite the big, popular bitmaps (tens of MB) every batch once a
catalog is large. So the purl bitmaps of one *product* (``pkg:deb/debian/openssl`` and all
its exact purls) are stored together, split by image-id *chunk* (65,536 ids, one roaring
container): a batch of new images (dense new ids) rewrites only the newest chunk of each
product it touches, while a cold product load stays one read per chunk (one, up to 65,536
images; 8,192-id chunks made the first query after a restart 6x slower for 50,000).

Column families and values::

    impact_groups  <gid u32><chunk u16>   msgpack [csmall, cbig, usmall, ubig]: exact-purl
                                          suffix -> ids; "small" maps hold [gid, id...]
                                          (sorted) for at most BIG ids, "big" maps the
                                          roaring bytes of larger sets; c = contains,
                                          u = used by the entrypoint
    impact_owners  <kind><tenant>[\\0<v>]  roaring bytes; kind t=tenant n=namespace r=repo
                                          l=label "k=v" g=tag u=usage known (no value)
    impact_images  <image id u32>         msgpack ImageRecord (owners + sorted gids)
    impact_names   p<product key>         gid u32 + its chunk numbers, u16 each (resident:
                                          the product directory; a cold load is plain gets)
                   d<tenant>\\0<digest>    image id u32    (resident)
                   t<tenant>              msgpack [tag, ...] (resident: glob targets)
                   v<vuln id>             msgpack [key, ...] (resident)

The small lists are exactly the fold's in-memory members, so a touched chunk encodes in one
msgspec call with no Python work per purl; only the few big sets are serialized one by one.
Roaring bitmaps are never run-optimised: without run containers a set has exactly one
serialization (arrays up to 4,096 ids per container, bitsets beyond), so the stored bytes
depend only on the ids, never on the order in which they were added or removed.

The product-level bitmaps (contains/used of ``pkg:deb/debian/openssl``) are not stored:
they are the union of the product's exact-purl bitmaps, rebuilt when a product is loaded.
The *logical* names below (``c:p:<key>`` ...) are how tests and ``index stats`` talk about
bitmaps independently of this physical layout.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any, Protocol, cast

import msgspec
from pyroaring import BitMap

from streamproc.names import IMPACT_GROUPS_CF, IMPACT_IMAGES_CF, IMPACT_NAMES_CF, IMPACT_OWNERS_CF

GROUPS_CF = IMPACT_GROUPS_CF
IMAGES_CF = IMPACT_IMAGES_CF
NAMES_CF = IMPACT_NAMES_CF
OWNERS_CF = IMPACT_OWNERS_CF

FAMILIES = (GROUPS_CF, OWNERS_CF, IMAGES_CF, NAMES_CF)

CHUNK_BITS = 16
CHUNK_IDS = 1 << CHUNK_BITS
BIG = 16
"""Id sets up to this size are kept and stored as plain sorted lists (appended to in place
by the fold, encoded by msgspec in bulk); larger ones as roaring bitmaps. The trade: a cold
query decodes list ids into Python ints (~150 ns each), while each big member costs ~2 µs
in every batch that touches it. For the benchmark's cold query 16 decodes ~185,000 list ids
where 128 decoded ~345,000 (~40 ms against ~60 ms)."""

PRODUCT = b"p"
DIGEST = b"d"
TAGS = b"t"
VULN = b"v"
PENDING = b"q"
"""An image's ids not yet merged into the stored chunks (:mod:`streamproc.impact.pending`)."""

OWNER_TENANT = b"t"
OWNER_NAMESPACE = b"n"
OWNER_REPO = b"r"
OWNER_LABEL = b"l"
OWNER_TAG = b"g"
OWNER_USAGE = b"u"
"""The tenant's images whose producer knows which components the entrypoint uses: usage
narrows only these; every other image counts as using everything it contains."""
OWNER_KINDS = (OWNER_TENANT, OWNER_NAMESPACE, OWNER_REPO, OWNER_LABEL, OWNER_TAG, OWNER_USAGE)
SEP = "\x00"

# -- logical names (independent of the physical layout) ----------------------------------
CONTAINS_PRODUCT = b"c:p:"
CONTAINS_PURL = b"c:e:"
USED_PRODUCT = b"u:p:"
USED_PURL = b"u:e:"
LOGICAL_OWNER = b"o:"


class ImageLike(Protocol):
    tenant: str
    registry: str
    repo: str
    namespace: str
    tags: list[str]
    labels: dict[str, str]
    purls: list[str]
    product_keys: list[str]
    used: list[bool]
    usage_known: bool


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def group_key(gid: int, chunk: int) -> bytes:
    return gid.to_bytes(4, "big") + chunk.to_bytes(2, "big")


def pack_chunks(chunks: Collection[int]) -> bytes:
    if len(chunks) == 1:
        (c,) = chunks
        return c.to_bytes(2, "big")
    return b"".join(c.to_bytes(2, "big") for c in sorted(chunks))


def scoped(tenant: str, value: str) -> str:
    """Name of a tenant-scoped value; tenants never contain NUL, so this is unambiguous."""
    return tenant + SEP + value


def storage_key(prefix: bytes, name: str) -> bytes:
    return prefix + name.encode("utf-8")


def label_value(key: str, value: str) -> str:
    return f"{key}={value}"


def repo_names(registry: str, repo: str) -> set[str]:
    """A repo filter matches "library/nginx" as well as "docker.io/library/nginx"."""
    if not repo:
        return set()
    return {repo, f"{registry}/{repo}"} if registry else {repo}


def owner_keys(
    tenant: str,
    registry: str,
    repo: str,
    namespace: str,
    tags: Iterable[str],
    labels: dict[str, str],
    usage_known: bool = False,
) -> list[bytes]:
    """Owner-bitmap keys (physical) that hold an image with these owners, sorted."""
    out = {OWNER_TENANT + tenant.encode()}
    if usage_known:
        out.add(OWNER_USAGE + tenant.encode())
    if namespace:
        out.add(OWNER_NAMESPACE + scoped(tenant, namespace).encode())
    out.update(OWNER_REPO + scoped(tenant, r).encode() for r in repo_names(registry, repo))
    out.update(OWNER_LABEL + scoped(tenant, label_value(k, v)).encode() for k, v in labels.items())
    out.update(OWNER_TAG + scoped(tenant, t).encode() for t in tags)
    return sorted(out)


def image_bitmap_names(rec: ImageLike) -> dict[bytes, set[str]]:
    """Every logical bitmap (prefix -> names) that holds this image's id."""
    owners: set[str] = set()
    for key in owner_keys(
        rec.tenant, rec.registry, rec.repo, rec.namespace, rec.tags, rec.labels, rec.usage_known
    ):
        owners.add(key[:1].decode() + ":" + key[1:].decode())
    return {
        CONTAINS_PRODUCT: set(rec.product_keys),
        CONTAINS_PURL: set(rec.purls),
        USED_PRODUCT: {k for k, u in zip(rec.product_keys, rec.used, strict=True) if u},
        USED_PURL: {p for p, u in zip(rec.purls, rec.used, strict=True) if u},
        LOGICAL_OWNER: owners,
    }


_VERSION_START = re.compile(r"[@?#]")


def product_part(purl: str) -> str:
    """The version-less prefix of a canonical purl (its product key)."""
    m = _VERSION_START.search(purl)
    return purl[: m.start()] if m else purl


# -- id sets ----------------------------------------------------------------------------
Ids = list[int] | bytes
"""Stored ids of one exact purl in one chunk: ``[gid, id, ...]`` (sorted) while at most
``BIG`` ids, else the roaring serialization of the ids."""


def bitmap(values: Iterable[int] = ()) -> BitMap:
    """A bitmap that is never run-optimised (pyroaring's constructor would): see above."""
    return BitMap(values, optimize=False)


def stored_ids(v: Ids) -> BitMap:
    return BitMap.deserialize(v) if type(v) is bytes else bitmap(v[1:])


Chunk = tuple[dict[str, list[int]], dict[str, bytes], dict[str, list[int]], dict[str, bytes]]
_chunk_enc = msgspec.msgpack.Encoder(order="deterministic")
_chunk_dec = msgspec.msgpack.Decoder(Chunk)


def encode_chunk(
    csmall: dict[str, list[int]],
    cbig: dict[str, bytes],
    usmall: dict[str, list[int]],
    ubig: dict[str, bytes],
) -> bytes:
    return _chunk_enc.encode((csmall, cbig, usmall, ubig))


def decode_chunk(raw: bytes) -> Chunk:
    return _chunk_dec.decode(raw)


_side_dec = (
    msgspec.msgpack.Decoder(
        tuple[dict[str, list[int]], dict[str, bytes], msgspec.Raw, msgspec.Raw]
    ),
    msgspec.msgpack.Decoder(
        tuple[msgspec.Raw, msgspec.Raw, dict[str, list[int]], dict[str, bytes]]
    ),
)


def side_decoder(side: int) -> msgspec.msgpack.Decoder[Any]:
    """A decoder of stored chunks that leaves the other side (``Raw``) undecoded: items 0, 1
    hold the contains side, 2, 3 the used side."""
    return _side_dec[side]


def decode_side(raw: bytes, side: int) -> tuple[dict[str, list[int]], dict[str, bytes]]:
    """(small, big) members of one side of a stored chunk (0 contains, 1 used), leaving
    the other side undecoded: what rebuilding one product bitmap needs."""
    got = _side_dec[side].decode(raw)
    small, big = (got[0], got[1]) if not side else (got[2], got[3])
    return cast(dict[str, list[int]], small), cast(dict[str, bytes], big)


def chunk_members(raw: bytes) -> tuple[dict[str, Ids], dict[str, Ids]]:
    """(contains, used) of a stored chunk: exact-purl suffix -> stored ids."""
    cs, cb, us, ub = decode_chunk(raw)
    return {**cs, **cb}, {**us, **ub}


def encode_bitmap(bm: BitMap) -> bytes:
    return bm.serialize()


_list_enc = msgspec.msgpack.Encoder()
_list_dec = msgspec.msgpack.Decoder(list[str])


def encode_names(values: Iterable[str]) -> bytes:
    return _list_enc.encode(sorted(values))


def decode_names(raw: bytes) -> list[str]:
    return _list_dec.decode(raw)
