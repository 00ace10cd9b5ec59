"""``make run``'s demo: a reference scanner (when no scanner URL is configured), a small
catalog of the real SBOMs in ``tests/data/sboms`` indexed for tenant ``demo``, a schedule
subscribed to Feedser exports, and a printed guide of commands to try.

The catalog is published as ``image.indexed`` events like any other SBOM: the scanner
learns the images from the log (its ``scanner`` role, which ``up --demo`` runs), so nothing
is registered with it separately. Hook it into ``streamproc up`` after ``system.start()``:

    from streamproc.scanner.demo import seed_demo
    demo = await seed_demo(system)          # ... and on shutdown: await demo.close()
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamproc.bus.publisher import WrongExpectedSequence
from streamproc.config import environment
from streamproc.events import payloads as p
from streamproc.events.envelope import new_event
from streamproc.ids import derive_id
from streamproc.impact.purls import normalize_image_purls
from streamproc.impact.sbom import parse_sbom
from streamproc.scanner.images import IndexedImages
from streamproc.scanner.service import ScannerService, start_scanner

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
BASELINE = ("GHSA-r9hx-vwmv-q579", "GHSA-5h86-8mv2-jq9f", "DSA-5497-1")
"""Advisories the demo scanner starts with; the others are the Feedser export to try."""


@dataclass
class Demo:
    scanner: ScannerService | None
    scanner_url: str
    osv_dir: Path
    images: dict[str, str]
    guide: str

    async def close(self) -> None:
        if self.scanner is not None:
            await self.scanner.close()


def _image_event(tenant: str, name: str, raw: bytes) -> tuple[str, Any]:
    """The SBOM as ``image.indexed``, as ``streamproc index add`` makes it: a standard SBOM
    says nothing about which packages the entrypoint uses, so usage is unknown."""
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    comps = [
        p.Component(purl=n.purl, product_key=n.product_key)
        for n in normalize_image_purls(parse_sbom(raw).purls)
    ]
    repo = name.split(".")[0]
    payload = p.ImageIndexed(
        digest=digest, registry="demo.local", repository=repo, namespace="demo",
        tags=["latest"], components=comps, usage_known=False,
    )  # fmt: skip
    return digest, payload


async def seed_demo(
    system: Any,
    *,
    tenant: str = "demo",
    scanner_url: str | None = None,
    scanner_port: int = 8490,
    sbom_dir: Path = DATA / "sboms",
) -> Demo:
    """Seed the catalog and print the guide; starts the reference scanner unless
    ``scanner_url`` (or ``STREAMPROC_SCANNER_URL``) names one. The scanner reads its images
    from the ``scanner`` role, which ``system`` must then host."""
    settings = system.settings
    osv_dir = settings.data_dir / "demo" / "osv"
    osv_dir.mkdir(parents=True, exist_ok=True)
    for name in BASELINE:
        target = osv_dir / f"{name}.json"
        if not target.exists():
            shutil.copy(DATA / "osv" / f"{name}.json", target)
    shutil.copy(DATA / "osv" / "debian-sources.json", osv_dir.parent / "debian-sources.json")
    url = scanner_url or environment().get("STREAMPROC_SCANNER_URL")
    svc: ScannerService | None = None
    if not url:
        if "scanner" not in system.roles:
            raise ValueError("the demo's scanner reads images from the 'scanner' role: host it")
        svc = await start_scanner(
            port=scanner_port, osv_dir=osv_dir, kev_file=DATA / "kev.json",
            sources=osv_dir.parent / "debian-sources.json", images=IndexedImages.of(system),
        )  # fmt: skip
        url = svc.url
    images: dict[str, str] = {}
    events = []
    for path in sorted(sbom_dir.glob("*.json")):
        digest, payload = _image_event(tenant, path.name, path.read_bytes())
        images[digest] = path.name
        events.append(new_event("image.indexed", tenant, payload, system.clock.now(),
                                event_id=derive_id("demo", tenant, digest)))  # fmt: skip
    schedule = p.ScheduleCreated(
        schedule_id="demo-nightly", name="Demo nightly", cron="0 2 * * *", timezone="UTC",
        subscriptions=["feedser"], created_by="make run",
    )  # fmt: skip
    events.append(new_event("schedule.created", tenant, schedule, system.clock.now(),
                            event_id=derive_id("demo", tenant, "schedule")))  # fmt: skip
    for event in events:  # create-only: a second `make run` re-seeds nothing
        with contextlib.suppress(WrongExpectedSequence):
            await system.publisher.publish_event(event, expected_last_subject_seq=0)
    guide = render_guide(system.http_url or "http://127.0.0.1:8480", url, osv_dir, tenant, settings)
    print(guide, flush=True)
    return Demo(svc, url, osv_dir, images, guide)


def render_guide(gateway: str, scanner: str, osv_dir: Path, tenant: str, settings: Any) -> str:
    data = DATA
    nats = settings.nats_url or f"nats://127.0.0.1:{settings.nats_port}"
    sboms = len(list((data / "sboms").glob("*.json")))
    sources = osv_dir.parent / "debian-sources.json"
    new = f"{data}/osv/GHSA-cx63-2mw6-8hw5.json {data}/osv/DSA-5514-1.json"
    lines = [
        f"  -- demo: tenant {tenant!r}, {sboms} real SBOMs indexed, scanner at {scanner}"
        " (it learns images from the event log)",
        "  Try it (in another terminal):",
        "",
        "  # 1. follow the deltas Notify would receive",
        f"  streamproc notify tail --nats-url {nats} --tenant {tenant} \\",
        "      --kind rescan.delta --kind run.summary",
        "",
        "  # 2. index an SBOM of your own too (CycloneDX or SPDX JSON; the scanner learns it",
        "  #    from the log; without --used-purls every package it lists counts)",
        f"  streamproc index add --nats-url {nats} --tenant {tenant} \\",
        "      --image sha256:<64 hex> --repo my/app --sbom my-app.cdx.json",
        "",
        "  # 3. new advisories land (setuptools CVE-2024-6345, glibc CVE-2023-4911) ...",
        f"  cp {new} {osv_dir}/",
        f"  curl -s -X POST {scanner}/advisories/reload",
        "",
        "  # 4. ... and the advisory aggregator tells the scheduler (signed Feedser webhook)",
        f"  streamproc feedser export --osv {osv_dir} --kev {data}/kev.json \\",
        f"      --debian-sources {sources} --url {gateway} \\",
        '      --secret "$STREAMPROC_FEEDSER_SECRET"',
        "",
        "  # the scanner's counters, and its faults switch (429s, 5xx, latency, outages)",
        f"  curl -s {scanner}/admin/stats",
        f'  curl -s -X POST {scanner}/admin/faults -d \'{{"next429": 50, "retryAfterS": 0.5}}\'',
    ]
    return "\n" + "\n".join(lines) + "\n"
