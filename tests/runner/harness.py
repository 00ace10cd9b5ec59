"""A real runner for tests: the runner role in a System (real nats-server, RocksDB) against
the reference scanner on a real loopback port, plus helpers that publish runs the way the
planner does (``run.requested`` → ``run.planned`` → ``segment.enqueued`` on the log *and* on
the work queue with the same id) and read back what the runner emitted."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from streamproc.bus import jsapi
from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, decode, encode, new_event
from streamproc.hlc import wall_ms
from streamproc.ids import derive_id
from streamproc.notify import messages as nm
from streamproc.roles import System
from streamproc.runner.role import make_runner
from streamproc.runner.settings import RunnerSettings
from streamproc.scanner.faults import FaultConfig
from streamproc.scanner.service import ScannerService, start_scanner
from tests.helpers import env_configuration

DATA = Path(__file__).resolve().parent.parent / "data"
OSV = DATA / "osv"
KEV = DATA / "kev.json"
SOURCES = OSV / "debian-sources.json"
SBOMS = DATA / "sboms"


def digest_of(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def hlc() -> str:
    return f"{wall_ms()}:0:test"


async def scanner(
    advisories: Sequence[str] = (), faults: FaultConfig | None = None
) -> ScannerService:
    """The reference scanner with the given advisories (file stems of tests/data/osv)."""
    svc = await start_scanner(kev_file=KEV, sources=SOURCES, faults=faults)
    for name in advisories:
        await add_advisory(svc, name)
    return svc


async def add_advisory(svc: ScannerService, name: str) -> None:
    from streamproc.scanner.advisories import parse_advisory

    svc.catalog.db.add(parse_advisory((OSV / f"{name}.json").read_bytes(), svc.catalog.db.kev))
    svc.catalog.db.reindex()


def register_images(svc: ScannerService, images: dict[str, str]) -> None:
    """``{digest: sbom file name}``; SBOMs are stored once by content."""
    keys: dict[str, str] = {}
    for digest, name in images.items():
        if name not in keys:
            keys[name], _ = svc.catalog.add_sbom((SBOMS / name).read_bytes())
        svc.catalog.add_image(digest, keys[name], f"registry.test/{name.split('.')[0]}:latest")


def register_sbom_text(svc: ScannerService, digest: str, document: bytes) -> None:
    key, _ = svc.catalog.add_sbom(document)
    svc.catalog.add_image(digest, key)


async def start_runner(tmp: Path, url: str, prefix: str, runner: RunnerSettings) -> System:
    """The runner role with ``runner`` settings, as ``streamproc runner`` starts it."""
    settings = Settings(
        configuration=env_configuration(), data_dir=tmp, nats_url=url, prefix=prefix, node_id="test"
    )
    system = System(settings, ["runner"], http=False, specs={"runner": make_runner(runner)})
    await system.start()
    return system


class Planner:
    """Publishes runs and segments following the planner contract."""

    def __init__(self, pub: Publisher, prefix: str) -> None:
        self.pub = pub
        self.prefix = prefix

    async def schedule(self, tenant: str, schedule_id: str, notify: p.NotifyRule) -> None:
        payload = p.ScheduleCreated(
            schedule_id=schedule_id, name=schedule_id, cron="0 2 * * *", timezone="UTC",
            notify=notify,
        )  # fmt: skip
        await self.pub.publish_event(new_event("schedule.created", tenant, payload, hlc()))

    async def run(
        self,
        tenant: str,
        run_id: str,
        digests: Sequence[str],
        *,
        size: int = 100,
        schedule_id: str | None = None,
        priority: int = 3,
        rate: int | None = None,
        mode: str = "analysis-only",
        enqueue: bool = True,
    ) -> list[p.SegmentEnqueued]:
        req = p.RunRequested(run_id=run_id, trigger="feedser", schedule_id=schedule_id)
        events = [new_event("run.requested", tenant, req, hlc(), event_id=derive_id(run_id, "rq"))]
        segs = [
            p.SegmentEnqueued(
                segment_id=derive_id(run_id, "segment", i), run_id=run_id, shard=i,
                digests=list(digests[i * size : (i + 1) * size]), rate_per_second=rate,
                mode=mode, priority=priority,  # type: ignore[arg-type]
            )
            for i in range((len(digests) + size - 1) // size)
        ]  # fmt: skip
        plan = p.RunPlanned(
            run_id=run_id,
            trigger="feedser",
            schedule_ids=[schedule_id] if schedule_id else [],
            stats=p.RunStats(candidates=len(digests), queued=len(digests)),
            segments=[p.SegmentRef(segment_id=s.segment_id, shard=s.shard, images=len(s.digests))
                      for s in segs],
        )  # fmt: skip
        events.append(
            new_event("run.planned", tenant, plan, hlc(), event_id=derive_id(run_id, "pl"))
        )
        await self.pub.publish_events(events)
        if enqueue:
            await self.enqueue(tenant, segs)
        return segs

    async def enqueue(self, tenant: str, segs: Sequence[p.SegmentEnqueued]) -> None:
        items = []
        log_events = []
        for s in segs:
            e = new_event("segment.enqueued", tenant, s, hlc(), event_id=s.segment_id,
                          correlation_id=s.run_id)  # fmt: skip
            log_events.append(e)
            items.append((f"{self.prefix}.work.{tenant}.segment.{s.priority}", encode(e), e.id))
        await self.pub.publish_events(log_events)
        await self.pub.publish_many(items)

    async def cancel(self, tenant: str, run_id: str) -> None:
        payload = p.RunCancelRequested(run_id=run_id, by="test", reason="test cancel")
        await self.pub.publish_event(new_event("run.cancel_requested", tenant, payload, hlc()))


async def stream_messages(nc: Any, stream: str, subject: str = ">") -> list[tuple[int, str, bytes]]:
    """Every message of ``stream`` (optionally filtered), via direct stream gets."""
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    out = []
    seq = info.state.first_seq
    while seq and seq <= info.state.last_seq:
        try:
            doc = await jsapi.request(
                nc, f"STREAM.MSG.GET.{stream}", {"seq": seq, "next_by_subj": subject}
            )
        except jsapi.JsApiError:
            break
        m = doc["message"]
        out.append((m["seq"], m["subject"], base64.b64decode(m.get("data") or "")))
        seq = m["seq"] + 1
    return out


async def events(nc: Any, stream: str, kind: str | None = None) -> list[Envelope]:
    evs = [decode(d) for _, _, d in await stream_messages(nc, stream)]
    return [e for e in evs if kind is None or e.kind == kind]


async def notify_messages(nc: Any, stream: str) -> list[nm.AnyMessage]:
    return [nm.decode(d) for _, _, d in await stream_messages(nc, stream)]


async def wait_until(pred: Any, timeout: float = 30.0, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(every)


def per_digest(evs: Sequence[Envelope]) -> Counter[str]:
    return Counter(e.payload.digest for e in evs)


def decode_json(b: bytes) -> Any:
    return msgspec.json.decode(b)
