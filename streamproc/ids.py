"""Identifiers: tenant ids, deterministic event ids, UUIDv7, subject-safe tokens, and
numbers read from untrusted text (ASCII digits only).

Every id that a process derives from a cause goes through :func:`derive_id`, so a crash and
redo produces the same id and JetStream's ``Nats-Msg-Id`` de-duplication absorbs the repeat.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterable, Mapping

TENANT_RE = re.compile(r"^[a-z0-9_-]{1,128}(?!\n)$")
"""``(?!\n)$``: Python's ``$`` also matches before a final newline; JSON Schema's does not."""
_TOKEN_RE = re.compile(r"[A-Za-z0-9_:\-]{1,128}")


class InvalidTenant(ValueError):
    """A tenant id that is not safe as a subject token; there is no implicit default."""


def validate_tenant(tenant: object) -> str:
    if not isinstance(tenant, str) or not TENANT_RE.fullmatch(tenant):
        raise InvalidTenant(
            f"invalid tenant id {tenant!r}: use 1-128 lowercase ASCII letters, digits, '-' or '_'"
        )
    return tenant


def ascii_int(text: str, max_digits: int = 19) -> int | None:
    """``text`` as a non-negative integer if it is 1..``max_digits`` ASCII digits, else None.
    ``str.isdigit`` alone also says yes to ``²`` (which ``int`` refuses) and to other
    scripts' digits (which ``int`` reads); ``int`` alone takes signs, spaces and ``_``."""
    if 0 < len(text) <= max_digits and text.isascii() and text.isdigit():
        return int(text)
    return None


def derive_id(*parts: str | int) -> str:
    """Id derived from its cause: ``sha256`` over the parts, unambiguous about boundaries."""
    framed = []
    for p in parts:
        b = str(p).encode()
        framed.append(len(b).to_bytes(4, "big"))
        framed.append(b)
    return hashlib.sha256(b"".join(framed)).hexdigest()[:40]


def spill_run_id(root_run_id: str, offset: int) -> str:
    """The continuation that plans a run's surplus from image ``offset`` of its cause (the
    planner requests it; the read model expects it, to tell the backlog)."""
    return derive_id(root_run_id, "spill", offset)


def export_run_id(
    tenant: str, export_ids: Iterable[str], revisions: Mapping[str, int] | None = None
) -> str:
    """``derive_id("run", tenant, *sorted export ids)``: same exports, same run. A run of
    later revisions (``revisions``: ref → revision, those past the first) adds them, so a
    follow-up never takes the id of the run before it. The planner requests the run by this
    id; the runner tells by it the run exports were coalesced into from a spill."""
    later: list[str | int] = [
        part for ref, n in sorted((revisions or {}).items()) if n > 1 for part in (ref, n)
    ]
    if not later:
        return derive_id("run", tenant, *sorted(export_ids))
    return derive_id("run", tenant, *sorted(export_ids), "revisions", *later)


def uuid7() -> str:
    """RFC 9562 UUIDv7: time-ordered, for events that have no cause to derive from."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def shard_token(value: str, shards: int) -> str:
    """``s<NN>``: which of ``shards`` subjects (at most 256) an aggregate id goes to."""
    return "s%02x" % (hashlib.sha256(value.encode()).digest()[0] % shards)


def subject_token(value: str) -> str:
    """A NATS subject token for an aggregate id; ids that are not token-safe are hashed."""
    if _TOKEN_RE.fullmatch(value):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:32]


FNV32_OFFSET = 0x811C9DC5
FNV32_PRIME = 0x01000193


def partition_of(token: str, partitions: int) -> int:
    """The partition NATS's subject mapping ``partition(N, …)`` puts a subject token in:
    FNV-1a (32 bit) of its bytes, modulo N. The gateway routes a tenant's previews by it to
    the planner that holds the tenant's partition."""
    h = FNV32_OFFSET
    for b in token.encode():
        h = ((h ^ b) * FNV32_PRIME) & 0xFFFFFFFF
    return h % partitions
