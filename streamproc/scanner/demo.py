"""``make run``'s demo: a reference scanner (when no scanner URL is configured and
``scanner.kind`` is ``stella``), a small catalog of the real SBOMs in ``demo_data/sboms``
(package data) indexed for tenant ``demo``, a schedule subscribed to Feedser and Vexer
exports, and a printed guide of commands to try.

The catalog is published as ``image.indexed`` events like any other SBOM, each SBOM kept in
the SBOM store first (what the tool kinds evaluate): the reference scanner learns the images
from the log (its ``scanner`` role, which ``up --demo`` runs), so nothing is registered with
it separately. Hook it into ``streamproc up`` after ``system.start()``:

    from streamproc.scanner.demo import seed_demo
    demo = await seed_demo(system)          # ... and on shutdown: await demo.close()
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamproc.backends.settings import from_sections as scanner_from_sections
from streamproc.bus import objects
from streamproc.bus.publisher import WrongExpectedSequence
from streamproc.config import Configuration
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Sections
from streamproc.devsetup import cli_command
from streamproc.events import payloads as p
from streamproc.events.envelope import new_event
from streamproc.ids import derive_id
from streamproc.names import DEFAULT_PREFIX
from streamproc.sbom.parse import parse_sbom
from streamproc.sbom.publish import store_sbom
from streamproc.sbom.purls import normalize_image_purls
from streamproc.scanner.indexed import IndexedImages
from streamproc.scanner.service import ScannerService, start_scanner

DATA = Path(__file__).resolve().parent / "demo_data"
"""The demo's SBOMs, advisories, KEV catalog and Debian source map: package data, so an
installed wheel runs the demo too (test-only advisories stay under tests/data)."""
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
        tags=["latest"], components=comps, usage_known=False, sbom=objects.key_of(raw),
    )  # fmt: skip
    return digest, payload


def scanner_port_from(sections: Sections) -> int:
    """``scanner.port``: the demo's reference scanner's port (1..65535, checked at start)."""
    return sections.scanner.port


def load_scanner_port(env: Mapping[str, str]) -> int:
    """:func:`scanner_port_from` the text of ``env``, decoded as at start (tests)."""
    return scanner_port_from(Configuration(values=env).sections)


async def seed_demo(
    system: Any,
    *,
    tenant: str = "demo",
    scanner_url: str | None = None,
    scanner_port: int | None = None,
    sbom_dir: Path = DATA / "sboms",
    configuration: Configuration | None = None,
) -> Demo:
    """Seed the catalog and print the guide; starts the reference scanner (on
    ``scanner_port``, else ``STREAMPROC_SCANNER_PORT``, else 8490) unless ``scanner_url`` (or
    ``STREAMPROC_SCANNER_URL``) names one or ``scanner.kind`` is a tool (the runners then run
    it on the stored SBOMs, and no reference scanner is needed). The scanner reads its images
    from the ``scanner`` role, which ``system`` must then host. ``configuration``: where
    those settings come from (default: ``system``'s)."""
    settings = system.settings
    conf: Configuration = configuration or settings.configuration
    osv_dir = settings.data_dir / "demo" / "osv"
    osv_dir.mkdir(parents=True, exist_ok=True)
    for name in BASELINE:
        target = osv_dir / f"{name}.json"
        if not target.exists():
            shutil.copy(DATA / "osv" / f"{name}.json", target)
    shutil.copy(DATA / "osv" / "debian-sources.json", osv_dir.parent / "debian-sources.json")
    url = scanner_url or conf.get(env_name("scanner.url"))
    scanner = conf.built(scanner_from_sections)
    tool = scanner.tool
    svc: ScannerService | None = None
    if tool is not None:
        url = ""
    elif not url:
        if "scanner" not in system.roles:
            raise ValueError("the demo's scanner reads images from the 'scanner' role: host it")
        if scanner_port is None:
            scanner_port = conf.built(scanner_port_from)
        svc = await start_scanner(
            port=scanner_port, osv_dir=osv_dir, kev_file=DATA / "kev.json",
            sources=osv_dir.parent / "debian-sources.json", images=IndexedImages.of(system),
            epss_file=DATA / "epss.csv",
        )  # fmt: skip
        url = svc.url
    images: dict[str, str] = {}
    events = []
    for path in sorted(sbom_dir.glob("*.json")):
        raw = path.read_bytes()
        digest, payload = _image_event(tenant, path.name, raw)
        await store_sbom(system.publisher.nc, settings.prefix, raw)  # kept before it is named
        images[digest] = path.name
        events.append(new_event("image.indexed", tenant, payload, system.clock.now(),
                                event_id=derive_id("demo", tenant, digest)))  # fmt: skip
    schedule = p.ScheduleCreated(
        schedule_id="demo-nightly", name="Demo nightly", cron="0 2 * * *", timezone="UTC",
        subscriptions=["feedser", "vexer"], created_by="make run",
    )  # fmt: skip
    events.append(new_event("schedule.created", tenant, schedule, system.clock.now(),
                            event_id=derive_id("demo", tenant, "schedule")))  # fmt: skip
    for event in events:  # create-only: a second `make run` re-seeds nothing
        with contextlib.suppress(WrongExpectedSequence):
            await system.publisher.publish_event(event, expected_last_subject_seq=0)
    gateway = system.http_url or "http://127.0.0.1:8480"
    what = f"{scanner.kind} ({tool.path})" if tool is not None else ""
    guide = render_guide(gateway, url, osv_dir, tenant, settings, tool=what)
    print(guide, flush=True)
    return Demo(svc, url, osv_dir, images, guide)


def where_flags(settings: Any) -> tuple[str, str]:
    """What a command in another terminal needs to reach this system, and the data
    directory flag alone: nothing for the default data directory (the commands find its
    server there), else that directory or the external server, and a non-default prefix."""
    data = "" if Path(settings.data_dir) == Path("data") else f" --data-dir {settings.data_dir}"
    flags = f" --nats-url {settings.nats_url}" if settings.nats_url else data
    if settings.prefix != DEFAULT_PREFIX:
        flags += f" --prefix {settings.prefix}"
    return flags, data


def render_guide(
    gateway: str, scanner: str, osv_dir: Path, tenant: str, settings: Any, *, tool: str = ""
) -> str:
    """The guide ``make run`` prints; ``tool``: the scanner kind and executable the runners
    run on the stored SBOMs (then no reference scanner runs, and its steps are left out)."""
    data = DATA
    cli = cli_command()
    at, data_dir = where_flags(settings)
    generator = str(Path(cli).with_name("cyclonedx-py")) if "/" in cli else "cyclonedx-py"
    sboms = len(list((data / "sboms").glob("*.json")))
    sources = osv_dir.parent / "debian-sources.json"
    new = f"{data}/osv/GHSA-cx63-2mw6-8hw5.json {data}/osv/DSA-5514-1.json"
    answers = (
        f"scanner.kind {tool} runs on each stored SBOM (no reference scanner)"
        if tool
        else f"scanner at {scanner} (it learns images from the event log)"
    )
    lines = [
        f"  -- demo: tenant {tenant!r}, {sboms} real SBOMs indexed and kept, {answers}",
        "  Try it (in another terminal):",
        "",
        "  # 1. follow the deltas Notify would receive",
        f"  {cli} notify tail{at} --tenant {tenant} \\",
        "      --kind rescan.delta --kind run.summary",
        "",
        "  # 2. index an SBOM of your own too (CycloneDX or SPDX JSON; here: this environment's,",
        "  #    by cyclonedx-py; streamproc keeps it for the scanner; without --used-purls every",
        "  #    package it lists counts)",
        f"  {generator} environment -o my-app.cdx.json",
        f"  {cli} index add{at} --tenant {tenant} --repo my/app --sbom my-app.cdx.json \\",
        "      --image \"sha256:$(sha256sum my-app.cdx.json | cut -d' ' -f1)\"",
        "",
        "  # 3. new advisories land (setuptools CVE-2024-6345, glibc CVE-2023-4911) ...",
        f"  cp {new} {osv_dir}/",
        *([] if tool else [f"  curl -s -X POST {scanner}/advisories/reload"]),
        "",
        "  # 4. ... and the advisory aggregator tells the scheduler: a Feedser webhook, signed",
        "  #    (STREAMPROC_FEEDSER_SECRET exported as above) and with an access token (DPoP-",
        f"  #    bound, minted from {Path(settings.data_dir) / 'dev' / 'issuer.jwk'} for tenant"
        f" {tenant!r})",
        f"  {cli} feedser export{data_dir} --osv {osv_dir} --kev {data}/kev.json \\",
        f"      --epss {data}/epss.csv \\",
        f"      --debian-sources {sources} --url {gateway} \\",
        '      --secret "$STREAMPROC_FEEDSER_SECRET"',
    ]
    if not tool:
        lines += [
            "",
            "  # the scanner's counters, and its faults switch (429s, 5xx, latency, outages):",
            "  # the next 5 calls are throttled and the runner's retries absorb them; '{}' is off",
            f"  curl -s {scanner}/admin/stats",
            f"  curl -s -X POST {scanner}/admin/faults -d "
            + '\'{"next429": 5, "retryAfterS": 0.5}\'',
            f"  curl -s -X POST {scanner}/admin/faults -d '{{}}'",
        ]
    return "\n" + "\n".join(lines) + "\n"
