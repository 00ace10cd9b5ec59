"""``streamproc notify tail --http URL``: follow the HTTP feed with a durable local checkpoint.

The checkpoint (epoch, sequence) is written after each message is handled (printed), so a
restart resumes after the last one handled; it only ever moves to a message it handled. The
tail reports its position to the feed before each page and after each handled batch. It
fails closed — it stops with the reason and never moves its checkpoint by itself — when the
stream's epoch changed, the stream is missing while a checkpoint exists, or the feed says
retention may have removed messages past the checkpoint (``retention-gap``). A feed that is
unavailable for now (5xx, no connection) leaves the checkpoint where it is: the tail waits and
asks again (``--once`` stops with exit code 1 instead). A consumer registered at zero has no
position yet and starts at the first message still held.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from streamproc.client.http import ApiClient, Reply, Unreachable
from streamproc.client.tokens import TokenUnavailable
from streamproc.names import API_BASE
from streamproc.notify import messages as nm


class FeedClosed(RuntimeError):
    """The feed cannot be followed safely from the checkpoint; the reason says why."""


class FeedRefused(RuntimeError):
    """The feed refuses this client (401/403: token, identity, scope); the reason says why."""


class FeedUnavailable(RuntimeError):
    """The feed cannot answer for now (5xx, no connection): try again, checkpoint kept."""


MAX_PAUSE_S = 30.0


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
        api: ApiClient,
        kind: str = "rescan.delta",
        limit: int = 100,
        poll_s: float = 1.0,
        out: Callable[[nm.AnyMessage, int], None] | None = None,
    ) -> None:
        self.base = url.rstrip("/") + f"{API_BASE}/feeds/{kind}"
        self.url = url
        self.kind = kind
        self.state = state
        self.api = api
        self.limit = limit
        self.poll_s = poll_s
        self.out = out or (lambda msg, seq: print(seq, nm.encode(msg).decode(), flush=True))

    async def _call(self, method: str, url: str, **kw: Any) -> tuple[int, Any]:
        try:
            r: Reply = await self.api.request(method, url, **kw)
        except (Unreachable, TokenUnavailable) as exc:
            raise FeedUnavailable(f"feed not reachable: {exc}") from None
        if r.status >= 500:
            raise FeedUnavailable(f"feed answered {r.status}: {r.detail()}")
        if r.status in (401, 403):
            raise FeedRefused(f"feed refused this client ({r.status}): {r.detail()}")
        return r.status, r.json()

    async def _register(self, cp: Checkpoint | None) -> Checkpoint:
        body = {"streamEpoch": None, "seq": None} if cp is None else {
            "streamEpoch": cp.epoch, "seq": cp.seq}  # fmt: skip
        status, doc = await self._call("POST", f"{self.base}/consumer-checkpoint", json=body)
        if status == 404 and cp is not None:
            raise FeedClosed(f"stream missing while a checkpoint exists (seq {cp.seq}): "
                             f"{doc.get('detail')}")  # fmt: skip
        if status == 409:
            raise FeedClosed(f"checkpoint refused: {doc.get('detail')}")
        if status != 200:
            raise FeedClosed(f"checkpoint registration failed ({status}): {doc}")
        if cp is None:
            cp = Checkpoint(url=self.url, kind=self.kind, epoch=doc["epoch"], seq=0)
            save_checkpoint(self.state, cp)
        return cp

    async def step(self, cp: Checkpoint) -> tuple[Checkpoint, bool]:
        """One page; returns the new checkpoint and whether the feed is caught up."""
        params = {"afterSeq": str(cp.seq), "limit": str(self.limit), "streamEpoch": cp.epoch}
        status, doc = await self._call("GET", f"{self.base}/events", params=params)
        if status == 404:
            raise FeedClosed(f"stream missing while a checkpoint exists (seq {cp.seq})")
        if status == 409 and str(doc.get("type", "")).endswith(":retention-gap"):
            raise FeedClosed(f"retention gap after checkpoint {cp.seq}: {doc.get('detail')}. "
                             f"Not skipping ahead.")  # fmt: skip
        if status == 409:
            raise FeedClosed(f"epoch or position no longer valid: {doc.get('detail')}")
        if status != 200:
            raise FeedClosed(f"feed answered {status}: {doc}")
        if doc["epoch"] != cp.epoch:
            raise FeedClosed(f"stream epoch changed from {cp.epoch} to {doc['epoch']}")
        for ev in doc["events"]:
            msg = nm.decode(msgspec.json.encode(ev["payload"]))
            self.out(msg, ev["seq"])
            cp = msgspec.structs.replace(cp, seq=ev["seq"])
            save_checkpoint(self.state, cp)  # after the effect: at-least-once
        return cp, bool(doc["complete"])

    async def run(self, *, once: bool = False) -> Checkpoint:
        cp = load_checkpoint(self.state)
        if cp is not None and (cp.url != self.url or cp.kind != self.kind):
            raise FeedClosed(f"checkpoint {self.state} belongs to {cp.url} {cp.kind}")
        pause = self.poll_s
        async with self.api:
            while True:
                try:
                    cp = await self._register(cp)
                    seq = cp.seq
                    cp, caught_up = await self.step(cp)
                    if cp.seq != seq:
                        cp = await self._register(cp)  # report the handled batch
                except FeedUnavailable as exc:
                    if once:
                        raise
                    at = "none yet" if cp is None else cp.seq
                    print(f"streamproc: {exc}; checkpoint kept at {at}, asking again in "
                          f"{pause:g} s", file=sys.stderr)  # fmt: skip
                    await asyncio.sleep(pause)
                    pause = min(MAX_PAUSE_S, pause * 2)
                    continue
                pause = self.poll_s
                if caught_up:
                    if once:
                        return cp
                    await asyncio.sleep(self.poll_s)
