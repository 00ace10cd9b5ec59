"""``streamproc notify tail --http URL``: follow the HTTP feed with a durable local checkpoint.

The checkpoint (epoch, sequence) is written after each message is handled (printed), so a
restart resumes after the last one handled. The tail fails closed — it stops with the reason
and never moves its checkpoint by itself — when the stream's epoch changed, the stream is
missing while a checkpoint exists, or retention removed messages past the checkpoint. A
consumer registered at zero has no position yet and starts at the retention horizon.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from streamproc.notify import messages as nm


class FeedClosed(RuntimeError):
    """The feed cannot be followed safely from the checkpoint; the reason says why."""


class Checkpoint(msgspec.Struct, kw_only=True, rename="camel"):
    url: str
    kind: str
    epoch: str
    seq: int


def load_checkpoint(path: Path) -> Checkpoint | None:
    if not path.exists():
        return None
    return msgspec.json.decode(path.read_bytes(), type=Checkpoint)


def save_checkpoint(path: Path, cp: Checkpoint) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(msgspec.json.encode(cp))
    os.replace(tmp, path)  # atomic: a crash leaves the old or the new checkpoint


class HttpTail:
    def __init__(
        self,
        url: str,
        state: Path,
        *,
        kind: str = "rescan.delta",
        token: str | None = None,
        limit: int = 100,
        poll_s: float = 1.0,
        out: Callable[[nm.AnyMessage, int], None] | None = None,
    ) -> None:
        self.base = url.rstrip("/") + f"/api/v1/scheduler/feeds/{kind}"
        self.url = url
        self.kind = kind
        self.state = state
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.limit = limit
        self.poll_s = poll_s
        self.out = out or (lambda msg, seq: print(seq, nm.encode(msg).decode(), flush=True))

    async def _json(self, resp: aiohttp.ClientResponse) -> Any:
        body = await resp.read()
        try:
            return msgspec.json.decode(body)
        except msgspec.DecodeError:
            return {"detail": body[:300].decode(errors="replace")}

    async def _register(self, s: aiohttp.ClientSession, cp: Checkpoint | None) -> Checkpoint:
        body = {"streamEpoch": None, "seq": None} if cp is None else {
            "streamEpoch": cp.epoch, "seq": cp.seq}  # fmt: skip
        async with s.post(f"{self.base}/consumer-checkpoint", json=body) as r:
            doc = await self._json(r)
            if r.status == 404 and cp is not None:
                raise FeedClosed(f"stream missing while a checkpoint exists (seq {cp.seq}): "
                                 f"{doc.get('detail')}")  # fmt: skip
            if r.status == 409:
                raise FeedClosed(f"checkpoint refused: {doc.get('detail')}")
            if r.status != 200:
                raise FeedClosed(f"checkpoint registration failed ({r.status}): {doc}")
        if cp is None:
            cp = Checkpoint(url=self.url, kind=self.kind, epoch=doc["epoch"], seq=0)
            save_checkpoint(self.state, cp)
        return cp

    async def step(self, s: aiohttp.ClientSession, cp: Checkpoint) -> tuple[Checkpoint, bool]:
        """One page; returns the new checkpoint and whether the feed is caught up."""
        params = {"afterSeq": str(cp.seq), "limit": str(self.limit), "streamEpoch": cp.epoch}
        async with s.get(f"{self.base}/events", params=params) as r:
            doc = await self._json(r)
            if r.status == 404:
                raise FeedClosed(f"stream missing while a checkpoint exists (seq {cp.seq})")
            if r.status == 409:
                raise FeedClosed(f"epoch or position no longer valid: {doc.get('detail')}")
            if r.status != 200:
                raise FeedClosed(f"feed answered {r.status}: {doc}")
        if doc["epoch"] != cp.epoch:
            raise FeedClosed(f"stream epoch changed from {cp.epoch} to {doc['epoch']}")
        if cp.seq > 0 and doc["retentionHorizon"] > cp.seq + 1:
            raise FeedClosed(
                f"retention gap: checkpoint at {cp.seq}, the stream now starts at "
                f"{doc['retentionHorizon']}; messages {cp.seq + 1}..{doc['retentionHorizon'] - 1} "
                f"are gone. Not skipping ahead."
            )
        for ev in doc["events"]:
            msg = nm.decode(msgspec.json.encode(ev["payload"]))
            self.out(msg, ev["seq"])
            cp = msgspec.structs.replace(cp, seq=ev["seq"])
            save_checkpoint(self.state, cp)  # after the effect: at-least-once
        if doc["complete"] and doc["head"] > cp.seq:
            cp = msgspec.structs.replace(cp, seq=doc["head"])
            save_checkpoint(self.state, cp)
        return cp, bool(doc["complete"])

    async def run(self, *, once: bool = False) -> Checkpoint:
        cp = load_checkpoint(self.state)
        if cp is not None and (cp.url != self.url or cp.kind != self.kind):
            raise FeedClosed(f"checkpoint {self.state} belongs to {cp.url} {cp.kind}")
        async with aiohttp.ClientSession(headers=self.headers) as s:
            cp = await self._register(s, cp)
            while True:
                cp = await self._register(s, cp)
                cp, caught_up = await self.step(s, cp)
                if caught_up:
                    if once:
                        return cp
                    await asyncio.sleep(self.poll_s)
