"""Batched direct get (``$JS.API.DIRECT.GET.<stream>``, nats-server >= 2.11): many stored
messages of one subject filter in one request, read by any replica of a stream with
``allow_direct``.

One request ``{"seq": N, "next_by_subj": S, "batch": B}`` answers up to ``B`` messages on
subjects matching ``S`` from sequence ``N`` on, each with ``Nats-Sequence``, ``Nats-Subject``,
``Nats-Time-Stamp`` and ``Nats-Num-Pending`` (matching messages after it), then a ``204 EOB``
status whose ``Nats-Num-Pending`` says how many matching messages are left after the batch.
``{"multi_last": [S], "batch": 1}`` answers the last message of ``S`` the same way. A ``404``
status means no message matches. Anything else — a timeout, ``503`` no responders (the
stream is missing, has no direct responders, or is between leaders), another status — raises
:class:`~streamproc.bus.jsapi.JsApiError`: a reader must never take an error for "no more".

A replica answering a direct get may lag the stream leader by a little; callers that need
the leader's view (a stream's epoch, first and last sequence) ask ``STREAM.INFO``.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

from streamproc.bus.jsapi import API, JsApiError

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
"""Most payload bytes one batch carries (the server stops early, and says what is left)."""


class DirectMsg(NamedTuple):
    seq: int
    subject: str
    data: bytes
    headers: dict[str, str]
    """The stored headers (``Nats-Msg-Id`` …) and the server's ``Nats-*`` ones."""
    time: str
    """``Nats-Time-Stamp``: when the stream stored it (RFC 3339, UTC)."""


class Batch(NamedTuple):
    messages: list[DirectMsg]
    pending: int
    """Matching messages after the last one returned (0: the batch reached the end)."""
    upto: int = 0
    """``Nats-UpTo-Sequence`` of a ``multi_last`` answer: the stream's last sequence as the
    answering replica saw it (0 otherwise)."""


def _status(m: Msg) -> str:
    return (m.headers or {}).get("Status", "")


def _description(headers: dict[Any, str]) -> str:
    """nats-py keys the status description by an Enum member, not by its text."""
    return next((v for k, v in headers.items() if getattr(k, "value", k) == "Description"), "")


async def get_batch(
    nc: Client, stream: str, request: dict[str, Any], timeout: float = 5.0
) -> Batch:
    """Send one batched direct get and collect its answer up to the end-of-batch status."""
    if "batch" not in request:
        raise ValueError("a batched direct get needs 'batch' (the server sends EOB only then)")
    request = {"max_bytes": DEFAULT_MAX_BYTES, **request}
    inbox = nc.new_inbox()
    queue: asyncio.Queue[Msg] = asyncio.Queue()
    sub = await nc.subscribe(inbox, cb=queue.put)
    out: list[DirectMsg] = []
    try:
        await nc.publish(f"{API}.DIRECT.GET.{stream}", msgspec.json.encode(request), reply=inbox)
        async with asyncio.timeout(timeout):
            while True:
                m = await queue.get()
                status = _status(m)
                h = m.headers or {}
                if not status:
                    out.append(
                        DirectMsg(
                            int(h["Nats-Sequence"]),
                            h.get("Nats-Subject", ""),
                            m.data,
                            h,
                            h.get("Nats-Time-Stamp", ""),
                        )
                    )
                elif status == "204":  # EOB
                    pending = int(h.get("Nats-Num-Pending", "0") or 0)
                    return Batch(out, pending, int(h.get("Nats-UpTo-Sequence", "0") or 0))
                elif status == "404" and not out:
                    return Batch([], 0)
                elif status == "503":
                    raise JsApiError(
                        503, 0, f"direct get on {stream}: no responders (stream unavailable)"
                    )
                else:
                    text = _description(h) or m.data.decode(errors="replace")
                    raise JsApiError(int(status), 0, f"direct get on {stream}: {text}".strip())
    except TimeoutError:
        raise JsApiError(408, 0, f"direct get on {stream} timed out after {timeout} s") from None
    finally:
        await sub.unsubscribe()


async def after(
    nc: Client, stream: str, subject: str, seq: int, limit: int, timeout: float = 5.0
) -> Batch:
    """Up to ``limit`` messages on ``subject`` (a filter) with sequence > ``seq``."""
    return await get_batch(
        nc, stream, {"seq": seq + 1, "next_by_subj": subject, "batch": limit}, timeout
    )


async def last_of(nc: Client, stream: str, subject: str, timeout: float = 5.0) -> Batch:
    """The last message on ``subject`` (none: an empty batch)."""
    return await get_batch(nc, stream, {"multi_last": [subject], "batch": 1}, timeout)


async def scan(
    nc: Client, stream: str, subject: str, page: int = 256, timeout: float = 5.0
) -> list[DirectMsg]:
    """Every message on ``subject`` from the first on, a batch at a time."""
    out: list[DirectMsg] = []
    seq = 0
    while True:
        got = await after(nc, stream, subject, seq, page, timeout)
        out.extend(got.messages)
        if not got.messages or got.pending == 0:
            return out
        seq = got.messages[-1].seq
