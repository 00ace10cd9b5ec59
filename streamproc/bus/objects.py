"""The SBOM store: a JetStream object store bucket, content-addressed by SHA-256.

The layout is NATS's own object store (ADR-20): the bucket is the stream
``OBJ_<bucket>``; an object's bytes are chunks on ``$O.<bucket>.C.<nuid>`` and its
description is the last message on ``$O.<bucket>.M.<base64url(name)>`` (a rollup keeps one).
So ``nats object get|put|ls`` and nats-py's ``js.object_store()`` read and write the same
objects; a producer that stores an SBOM itself (docs/api.md, "The direct path") does it with
either.

Every object is named ``sha256:<hex>`` of its bytes, so a name says its content and a
reader checks it. What this module adds to nats-py's store:

- **A repeated put writes no chunks again**: the object with that name already holds those
  bytes, so the put re-publishes its description only (a new sequence and time: see
  retention below). nats-py's put rewrites every chunk and then purges the old ones, and a
  reader that is streaming them meanwhile gets a truncated object or waits forever.
- **Writers are serialised** on the description subject
  (``Nats-Expected-Last-Subject-Sequence``), so two gateways storing one SBOM at once leave
  one set of chunks, not an orphaned second one.
- **Reads are batched direct gets** (any replica of an R3 bucket answers; no consumer is
  created per read) and check both digests.
- **Deletion is conditional** on the description's sequence: retention deletes an object only
  if nobody stored it again since it looked (:func:`delete_if_unchanged`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import secrets
from datetime import UTC, datetime
from typing import Any, NamedTuple

from nats.aio.client import Client

from streamproc.bus import direct, jsapi

CHUNK = 128 * 1024
"""Chunk size, as nats-py and the nats CLI write them."""
MAX_OBJECT = 64 * 1024 * 1024
"""The largest object the store accepts (the gateway's body caps are far lower)."""
NO_MESSAGE = 10037
WRONG_LAST_SEQUENCE = 10071
_SHA = "SHA-256="


class ObjectError(RuntimeError):
    """The store did not answer, or holds something that is not what its name says."""


class Missing(ObjectError):
    """No object of that name (never stored, or deleted)."""


class ObjectMeta(NamedTuple):
    name: str
    seq: int
    """Stream sequence of the description: changes with every put and delete."""
    time: datetime
    """When the stream stored the description (the server's clock)."""
    deleted: bool
    nuid: str
    size: int
    digest: str
    raw: dict[str, Any]


def stream_of(bucket: str) -> str:
    return f"OBJ_{bucket}"


def definition(bucket: str, replicas: int, description: str) -> dict[str, Any]:
    """The bucket's stream, as ``js.create_object_store`` makes it (JetStream API JSON)."""
    return {
        "name": stream_of(bucket),
        "description": description,
        "subjects": [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        "retention": "limits",
        "storage": "file",
        "num_replicas": replicas,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msg_size": 1024 * 1024,
        "discard": "new",
        "duplicate_window": 120 * 1_000_000_000,
        "deny_delete": False,
        "deny_purge": False,
        "allow_rollup_hdrs": True,
        "allow_direct": True,
    }


def key_of(data: bytes) -> str:
    """An object's name: ``sha256:`` and the hex digest of its bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _meta_subject(bucket: str, name: str) -> str:
    return f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"


def _nats_digest(data: bytes) -> str:
    return _SHA + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


def _parse_time(text: str) -> datetime:
    # Nats-Time-Stamp carries nanoseconds; datetime takes microseconds.
    head, dot, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}" if dot else head).replace(
        tzinfo=UTC
    )


def _described(m: direct.DirectMsg, name: str | None = None) -> ObjectMeta:
    """The description message ``m`` read (``name``: the one asked for; else its own)."""
    try:
        doc = json.loads(m.data)
    except ValueError:
        raise ObjectError(f"object {name or m.subject}: unreadable description") from None
    return ObjectMeta(
        name=name or str(doc.get("name") or ""),
        seq=m.seq,
        time=_parse_time(m.time),
        deleted=bool(doc.get("deleted")),
        nuid=str(doc.get("nuid") or ""),
        size=int(doc.get("size") or 0),
        digest=str(doc.get("digest") or ""),
        raw=doc,
    )


async def meta(nc: Client, bucket: str, name: str) -> ObjectMeta | None:
    """The object's description as stored last (deleted ones too), or None."""
    got = await direct.last_of(nc, stream_of(bucket), _meta_subject(bucket, name))
    return _described(got.messages[0], name) if got.messages else None


async def _publish(
    nc: Client, subject: str, data: bytes, headers: dict[str, str] | None = None
) -> int:
    js = nc.jetstream()
    try:
        ack = await js.publish(subject, data, headers=headers, timeout=10.0)
    except Exception as exc:  # nats-py raises its APIError subclasses with err_code
        code = getattr(exc, "err_code", None)
        if code == WRONG_LAST_SEQUENCE:
            raise _Conflict() from None
        raise ObjectError(f"storing on {subject}: {type(exc).__name__}: {exc}") from None
    return int(ack.seq)


class _Conflict(Exception):
    """Another writer changed the description since we read it."""


async def _purge(nc: Client, bucket: str, nuid: str) -> None:
    if nuid:
        await jsapi.request(
            nc, f"STREAM.PURGE.{stream_of(bucket)}", {"filter": f"$O.{bucket}.C.{nuid}"}
        )


async def put(nc: Client, bucket: str, data: bytes) -> str:
    """Store ``data`` under :func:`key_of` it and return that name. Storing the same bytes
    again re-publishes the description only."""
    if len(data) > MAX_OBJECT:
        raise ObjectError(f"object of {len(data)} bytes: at most {MAX_OBJECT} are stored")
    name = key_of(data)
    digest = _nats_digest(data)
    subject = _meta_subject(bucket, name)
    for _ in range(5):
        have = await meta(nc, bucket, name)
        expected = {"Nats-Expected-Last-Subject-Sequence": str(have.seq if have else 0)}
        rollup = {"Nats-Rollup": "sub", **expected}
        if have is not None and not have.deleted and have.digest == digest:
            try:  # the same bytes are there: a new description, no chunk rewritten
                await _publish(nc, subject, json.dumps(have.raw).encode(), rollup)
            except _Conflict:
                continue
            return name
        nuid = secrets.token_hex(11)  # chunks of this put only: a conflict purges just them
        chunks = f"$O.{bucket}.C.{nuid}"
        for i in range(0, max(len(data), 1), CHUNK):
            if data:
                await _publish(nc, chunks, data[i : i + CHUNK])
        info = {
            "name": name,
            "bucket": bucket,
            "nuid": nuid,
            "size": len(data),
            "mtime": datetime.now(UTC).isoformat(),
            "chunks": -(-len(data) // CHUNK),
            "digest": digest,
            "options": {"max_chunk_size": CHUNK},
        }
        try:
            await _publish(nc, subject, json.dumps(info).encode(), rollup)
        except _Conflict:
            await _purge(nc, bucket, nuid)  # another writer stored it first: use theirs
            continue
        if have is not None and have.nuid and have.nuid != nuid:
            await _purge(nc, bucket, have.nuid)  # a corrupt or deleted predecessor
        return name
    raise ObjectError(f"object {name} keeps changing under us; try again")


async def get(nc: Client, bucket: str, name: str, timeout: float = 10.0) -> bytes:
    """The object's bytes, checked against both digests; :class:`Missing` if there is none."""
    m = await meta(nc, bucket, name)
    if m is None or m.deleted:
        raise Missing(f"no object {name} in {bucket}")
    stream = stream_of(bucket)
    chunks = f"$O.{bucket}.C.{m.nuid}"
    parts: list[bytes] = []
    seq = 0
    size = 0
    while size < m.size:
        got = await direct.after(nc, stream, chunks, seq, 1024, timeout)
        if not got.messages:
            break
        for msg in got.messages:
            parts.append(msg.data)
            size += len(msg.data)
        seq = got.messages[-1].seq
        if got.pending == 0:
            break
    data = b"".join(parts)
    if _nats_digest(data) != m.digest or (name.startswith("sha256:") and key_of(data) != name):
        # Chunks purged under us (a deletion) or a producer that named it wrongly.
        raise ObjectError(f"object {name}: its bytes do not match its digest ({size} bytes)")
    return data


async def delete_if_unchanged(nc: Client, bucket: str, have: ObjectMeta) -> bool:
    """Delete the object unless its description changed since ``have`` was read (someone
    stored it again): True when this call deleted it."""
    info = {**have.raw, "deleted": True, "size": 0, "chunks": 0, "digest": "", "mtime": ""}
    headers = {"Nats-Rollup": "sub", "Nats-Expected-Last-Subject-Sequence": str(have.seq)}
    try:
        await _publish(nc, _meta_subject(bucket, have.name), json.dumps(info).encode(), headers)
    except _Conflict:
        return False
    await _purge(nc, bucket, have.nuid)
    return True


async def listing(nc: Client, bucket: str) -> list[ObjectMeta]:
    """Every object's current description (deleted ones included)."""
    out = []
    for m in await direct.scan(nc, stream_of(bucket), f"$O.{bucket}.M.>"):
        with contextlib.suppress(ObjectError):  # an unreadable one is nobody's to delete
            out.append(_described(m))
    return out
