"""A Notify-side consumer for embedding: a durable JetStream consumer on the Notify stream
that hands each message to you and acknowledges it only after your handler returned, so a
restarted consumer resumes exactly where it left off (at-least-once; de-duplicate by
``message.id`` if your effect is not idempotent).

    async with NotifyConsumer(nc, durable="pager", tenant="acme") as feed:
        async for msg, seq in feed:
            print(msg.kind, msg.image_digest)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.pull import PullLoop
from streamproc.cancellation import checkpoint
from streamproc.names import DEFAULT_PREFIX, NOTIFY_TAIL, stream_names
from streamproc.notify import messages as nm

NS = 1_000_000_000


class ConsumerConflict(ValueError):
    """The durable consumer exists and follows other subjects: reusing it would change
    what its other reader gets (JetStream updates the filter in place)."""


def default_durable(tenant: str | None, kinds: Sequence[str]) -> str:
    """``notify-tail`` for every tenant's deltas; another selection gets a name of its own,
    so tails that follow different things never share one consumer."""
    if tenant is None and list(kinds) == ["rescan.delta"]:
        return NOTIFY_TAIL
    return "-".join([NOTIFY_TAIL, tenant or "all", *sorted({k.replace(".", "-") for k in kinds})])


class NotifyConsumer:
    def __init__(
        self,
        nc: FastClient,
        *,
        durable: str,
        prefix: str = DEFAULT_PREFIX,
        tenant: str | None = None,
        kinds: Sequence[str] = ("rescan.delta",),
        ack_wait_s: float = 30.0,
        batch: int = 100,
    ) -> None:
        for k in kinds:
            if k not in nm.KINDS:
                raise ValueError(f"unknown Notify kind {k!r}; kinds: {', '.join(nm.KINDS)}")
        self.nc = nc
        self.durable = durable
        self.stream = stream_names(prefix)[2]
        self.subjects = [nm.subject(prefix, tenant or "*", k) for k in kinds]
        self.ack_wait_s = ack_wait_s
        self.batch = batch
        self._pull: PullLoop | None = None

    async def start(self) -> NotifyConsumer:
        """Create the durable consumer, or resume it; :class:`ConsumerConflict` when it
        exists with other subjects."""
        try:
            info = await jsapi.request(self.nc, f"CONSUMER.INFO.{self.stream}.{self.durable}")
        except jsapi.JsApiError as exc:
            if exc.err_code != jsapi.CONSUMER_NOT_FOUND:
                raise
        else:
            cfg = info.get("config", {})
            have = sorted(cfg.get("filter_subjects") or [cfg.get("filter_subject") or ">"])
            if have != sorted(self.subjects):
                raise ConsumerConflict(
                    f"the durable consumer {self.durable!r} on {self.stream} follows "
                    f"{', '.join(have)}, not {', '.join(sorted(self.subjects))} (another "
                    "reader may be using it)"
                )
        config: dict[str, Any] = {
            "durable_name": self.durable,
            "ack_policy": "explicit",
            "ack_wait": int(self.ack_wait_s * NS),
            "deliver_policy": "all",
            "max_ack_pending": self.batch * 4,
        }
        if len(self.subjects) == 1:
            config["filter_subject"] = self.subjects[0]
        else:
            config["filter_subjects"] = self.subjects
        await jsapi.create_consumer(self.nc, self.stream, config)
        self._pull = await PullLoop(self.nc, self.stream, self.durable, batch=self.batch).start()
        return self

    async def close(self) -> None:
        if self._pull is not None:
            await self._pull.close()
            self._pull = None

    async def __aenter__(self) -> NotifyConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def fetch(self, timeout: float = 1.0) -> list[tuple[nm.AnyMessage, int, bytes]]:
        """Messages received so far as (message, stream sequence, ack subject)."""
        assert self._pull is not None, "start() first"
        out = []
        for seq, _subject, data, reply in await self._pull.next_batch(self.batch, timeout):
            out.append((nm.decode(data), seq, reply))
        return out

    async def ack(self, reply: bytes) -> None:
        await self.nc.publish(reply.decode(), b"+ACK")

    async def __aiter__(self) -> AsyncIterator[tuple[nm.AnyMessage, int]]:
        """Yields each message; it is acknowledged when the loop asks for the next one."""
        while True:
            checkpoint()
            batch = await self.fetch()
            if not batch:
                await asyncio.sleep(0)
                continue
            for msg, seq, reply in batch:
                yield msg, seq
                await self.ack(reply)


def render(msg: nm.AnyMessage, seq: int | None = None) -> str:
    """One line per message, for ``streamproc notify tail``."""
    head = f"{seq:>8} " if seq is not None else ""
    if isinstance(msg, nm.RescanDelta):
        top = ", ".join(
            f"{f.vuln_id}({f.severity}{',KEV' if f.kev else ''}{_epss(f.epss)})"
            for f in msg.top_findings
        )
        kev = f" KEV {','.join(msg.kev_hits)}" if msg.kev_hits else ""
        return (
            f"{head}{msg.ts} {msg.tenant} rescan.delta run={msg.run_id} {msg.image_digest[:19]} "
            f"+{msg.new_criticals} critical +{msg.new_high} high{kev}: {top}"
        )
    if isinstance(msg, nm.ReportReady):
        return (
            f"{head}{msg.ts} {msg.tenant} report.ready run={msg.run_id} "
            f"{msg.image_digest[:19]} unchanged ({msg.new_findings} below the notify rule)"
        )
    vulns = "; ".join(
        f"{v.vuln_id}{' KEV' if v.kev else ''}{_epss(v.epss, ' ')} {v.severity} x{v.image_count}"
        for v in msg.vulnerabilities[:10]
    )
    t = msg.totals
    resolved = f" resolved={t.resolved}" if t.resolved else ""
    # A run that stopped says how far it got: "no new findings" of images never evaluated
    # would read as a clean bill.
    done = "" if msg.state == "completed" else f" evaluated={t.completed}/{t.candidates}"
    failed = f" failed={t.failed}" if t.failed else ""
    return (
        f"{head}{msg.ts} {msg.tenant} run.summary run={msg.run_id} {msg.state}{done}{failed} "
        f"deltas={t.deltas}{resolved}: {vulns or 'no new findings'}"
    )


def _epss(e: nm.Epss | None, sep: str = ",") -> str:
    return f"{sep}EPSS {e.score:.2f}" if e is not None else ""
