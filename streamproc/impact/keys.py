"""Storage layout of the impact index: column families, keys and value codecs.

Why this shape: a RocksDB write costs ~2 µs per value plus ~7 ns per byte through the
store, and what a batch changes must be written in that batch (same WriteBatch as the
checkpoint). One value per bitmap would mean ~240 values per indexed image; one value per
whole product would rewrite the big, popular bitmaps every batch once a catalog is large.
So the purl bitmaps of one *product* (``pkg:deb/debian/openssl`` and all its exact purls)
are stored together, split into *parts*: a part holds the product's images indexed in one
*window* of ``WINDOW`` image events (indexing or removal, counted in event order, so the
windows depend on the events only, never on batch cuts). A batch rewrites only the
current window's part of each product it touches, whose size is bounded by the window
however large the catalog grows; older parts change only when an image in them is
re-indexed or removed. A cold product is one prefix scan (its parts are adjacent keys).

Column families and values::

    impact_groups  <gid u32><part u32>    msgpack [csmall, cbig, usmall, ubig]: exact-purl
                                          suffix -> ids; "small" maps hold [gid, id...]
                                          (sorted) for at most BIG ids, "big" maps the
                                          roaring bytes of larger sets; c = contains,
                                          u = used by the entrypoint
    impact_owners  <kind><tenant>[\\0<v>]  roaring bytes; kind t=tenant n=namespace r=repo
                                          l=label "k=v" g=tag u=usage known (no value)
    impact_images  <image id u32>         msgpack ImageRecord (owners, sorted gids, part)
    impact_names   p<product key>         gid u32 (resident: the product directory)
                   d<tenant>\\0<digest>    image id u32    (resident)
                   t<tenant>              msgpack [tag, ...] (resident: glob targets)
                   v<vuln id>             msgpack [key, ...] (resident)
                   w                      msgpack [window size, image events folded,
                                          roaring gids with a part in the current window]

The small lists are exactly the fold's in-memory members, so a touched part encodes in one
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
from collections.abc import Iterable
from typing import Any, Protocol, cast

import msgspec
from pyroaring import BitMap

from streamproc.names import IMPACT_GROUPS_CF, IMPACT_IMAGES_CF, IMPACT_NAMES_CF, IMPACT_OWNERS_CF

GROUPS_CF = IMPACT_GROUPS_CF
IMAGES_CF = IMPACT_IMAGES_CF
NAMES_CF = IMPACT_NAMES_CF
OWNERS_CF = IMPACT_OWNERS_CF

FAMILIES = (GROUPS_CF, OWNERS_CF, IMAGES_CF, NAMES_CF)

WINDOW = 4096
"""Image events (indexing or removal) per window: the fold keeps the current window's part
of every product it touched decoded (the memory that bound sets), and a product gets one
part per window it is touched in. A state directory keeps the size it was built with."""
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
WINDOW_KEY = b"w"

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


def group_key(gid: int, part: int) -> bytes:
    return gid.to_bytes(4, "big") + part.to_bytes(4, "big")


def part_of(key: bytes) -> int:
    """The part number of an ``impact_groups`` key."""
    return int.from_bytes(key[4:8], "big")


class WindowState(msgspec.Struct, array_like=True, frozen=True):
    """Where the windows stand: their size, the image events folded so far (the current
    window is ``events // size``) and the products with a part in the current window."""

    size: int
    events: int
    gids: bytes


_window_enc = msgspec.msgpack.Encoder()
_window_dec = msgspec.msgpack.Decoder(WindowState)


def encode_window(w: WindowState) -> bytes:
    return _window_enc.encode(w)


def decode_window(raw: bytes) -> WindowState:
    return _window_dec.decode(raw)


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
