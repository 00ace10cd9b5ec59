"""``streamproc scanner``: the reference scanner backend as an aiohttp service on loopback.

It knows every image the index knows (folded from the event log, :mod:`.images`), plus any
registered by hand. Endpoints: ``POST /reports {imageDigest, tenant?, policyRevision?}``
(analysis-only),
``POST /scans {imageRef}`` + ``GET /scans/{id}`` (content refresh), ``GET /resolve?ref=``
(tag → digest), ``POST /sboms`` / ``POST /images`` (catalog), ``GET /reports/{digest}``,
``POST /advisories`` / ``DELETE /advisories/{id}`` / ``POST /advisories/reload``, and
``/admin/faults`` / ``/admin/stats``.
A repeated ``Idempotency-Key`` gets the first answer again without re-evaluating, so a
client retry after a lost response is not a second evaluation.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from streamproc.sbom.parse import SbomError
from streamproc.scanner.advisories import AdvisoryDb, AdvisoryError, parse_advisory
from streamproc.scanner.catalog import Attestation, Catalog
from streamproc.scanner.faults import FaultConfig, Faults
from streamproc.scanner.indexed import IndexedImages

IDEMPOTENCY_KEY = "Idempotency-Key"
CATCH_UP_S = 2.0
"""How long a report for an unknown image waits for the catalog to fold the log's head."""
_enc = msgspec.json.Encoder()


class ReportRequest(msgspec.Struct, kw_only=True, rename="camel"):
    image_digest: str
    tenant: str | None = None
    """Whose image (the runner sends it); without it, any tenant's with that digest."""
    policy_revision: str | None = None


class ScanRequest(msgspec.Struct, kw_only=True, rename="camel"):
    image_ref: str
    attest: bool = False


class SbomUpload(msgspec.Struct, kw_only=True, rename="camel"):
    digest: str
    sbom: msgspec.Raw
    ref: str | None = None
    attestation: Attestation | None = None


class ImageRef(msgspec.Struct, kw_only=True, rename="camel"):
    digest: str
    sbom_key: str
    ref: str | None = None


class ImagesUpload(msgspec.Struct, kw_only=True):
    images: list[ImageRef]


def _json(doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=_enc.encode(doc), status=status, content_type="application/json", headers=headers
    )


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return _json({"error": message}, status, headers)


@dataclass
class Scan:
    id: str
    ref: str
    digest: str
    done_at: float


class ScannerService:
    """The service's state: catalog, faults, idempotency answers and counters."""

    def __init__(
        self,
        db: AdvisoryDb,
        *,
        faults: Faults | None = None,
        scan_s: float = 0.05,
        idempotency_entries: int = 250_000,
        osv_dir: Path | None = None,
        kev_file: Path | None = None,
        sources: Path | None = None,
        images: IndexedImages | None = None,
        epss_file: Path | None = None,
    ) -> None:
        self.catalog = Catalog(db, indexed=images)
        self.faults = faults or Faults()
        self.scan_s = scan_s
        self.osv_dir, self.kev_file, self.sources = osv_dir, kev_file, sources
        self.epss_file = epss_file
        self._answers: OrderedDict[str, tuple[int, bytes]] = OrderedDict()
        self._cap = idempotency_entries
        self.scans: dict[str, Scan] = {}
        self._scan_ids = itertools.count(1)
        self.stats: dict[str, int] = {"reports": 0, "replayed": 0, "scans": 0, "notFound": 0}
        self.evaluations: dict[str, int] = {}
        """Idempotency key → number of fresh evaluations (a retry that replays is not one)."""
        self.runner: web.AppRunner | None = None
        self.url = ""

    # ------------------------------------------------------------------ app

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._chaos])
        r = app.router
        r.add_post("/reports", self.post_report)
        r.add_get("/reports/{digest}", self.get_report)
        r.add_post("/scans", self.post_scan)
        r.add_get("/scans/{scan_id}", self.get_scan)
        r.add_get("/resolve", self.resolve)
        r.add_post("/sboms", self.post_sbom)
        r.add_post("/images", self.post_images)
        r.add_get("/images/{digest}", self.get_image)
        r.add_post("/advisories", self.post_advisory)
        r.add_post("/advisories/reload", self.reload)
        r.add_delete("/advisories/{advisory_id}", self.delete_advisory)
        r.add_get("/admin/faults", self.get_faults)
        r.add_post("/admin/faults", self.set_faults)
        r.add_get("/admin/stats", self.get_stats)
        r.add_get("/healthz", self.healthz)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> ScannerService:
        # Idle keep-alive clients must not hold a shutdown for aiohttp's default 60 s.
        self.runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=1.0)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port, backlog=1024)
        await site.start()
        # An asyncio.Server or uvloop's, which is not one: read what both have.
        sockets = getattr(site._server, "sockets", None)
        assert sockets, "the site is started"
        bound = sockets[0].getsockname()[1]
        self.url = f"http://{host}:{bound}"
        self.catalog.base_url = self.url
        return self

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    @web.middleware
    async def _chaos(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Faults apply to the scanner API, never to the admin and health endpoints."""
        path = request.path
        if (
            path.startswith("/admin")
            or path == "/healthz"
            or not self.faults.config.applies_to(path)
        ):
            return await handler(request)  # type: ignore[no-any-return]  # aiohttp's handler type returns StreamResponse untyped here
        delay = self.faults.delay_s()
        if delay:
            await asyncio.sleep(delay)
        fault = self.faults.decide()
        if fault == "outage":
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPServiceUnavailable()
        if fault is not None:
            cfg = self.faults.config
            headers = {}
            if cfg.retry_after_s is not None:
                headers["Retry-After"] = f"{cfg.retry_after_s:g}"
            status = 429 if fault == "429" else cfg.status_5xx
            return _error(status, f"simulated {fault}", headers)
        return await handler(request)  # type: ignore[no-any-return]  # aiohttp's handler type returns StreamResponse untyped here

    # ------------------------------------------------------------------ scanner API

    def _remember(self, key: str | None, status: int, body: bytes) -> None:
        if not key:
            return
        self._answers[key] = (status, body)
        while len(self._answers) > self._cap:
            self._answers.popitem(last=False)

    async def post_report(self, request: web.Request) -> web.Response:
        key = request.headers.get(IDEMPOTENCY_KEY)
        if key and key in self._answers:
            self.stats["replayed"] += 1
            status, body = self._answers[key]
            return web.Response(body=body, status=status, content_type="application/json")
        try:
            req = msgspec.json.decode(await request.read(), type=ReportRequest)
        except msgspec.DecodeError as exc:
            return _error(400, f"invalid request: {exc}")
        report = self.catalog.report(req.image_digest, req.policy_revision, req.tenant)
        if report is None and self.catalog.indexed is not None:
            await self.catalog.indexed.catch_up(CATCH_UP_S)  # indexed a moment ago?
            report = self.catalog.report(req.image_digest, req.policy_revision, req.tenant)
        if report is None:
            self.stats["notFound"] += 1
            return _error(404, f"no SBOM for image {req.image_digest}")
        self.stats["reports"] += 1
        if key:
            self.evaluations[key] = self.evaluations.get(key, 0) + 1
        body = _enc.encode(report)
        self._remember(key, 200, body)
        return web.Response(body=body, content_type="application/json")

    async def get_report(self, request: web.Request) -> web.Response:
        digest, tenant = request.match_info["digest"], request.query.get("tenant")
        report = self.catalog.report(digest, request.query.get("policyRevision"), tenant)
        if report is None:
            return _error(404, "unknown image")
        return _json(report)

    async def post_scan(self, request: web.Request) -> web.Response:
        try:
            req = msgspec.json.decode(await request.read(), type=ScanRequest)
        except msgspec.DecodeError as exc:
            return _error(400, f"invalid request: {exc}")
        digest = self.catalog.refs.get(req.image_ref)
        if digest is None:
            return _error(404, f"unknown image ref {req.image_ref}")
        scan = Scan(
            f"scan-{next(self._scan_ids)}",
            req.image_ref,
            digest,
            asyncio.get_running_loop().time() + self.scan_s,
        )
        self.scans[scan.id] = scan
        self.stats["scans"] += 1
        return _json({"scanId": scan.id, "status": "running", "imageRef": scan.ref}, 202)

    async def get_scan(self, request: web.Request) -> web.Response:
        scan = self.scans.get(request.match_info["scan_id"])
        if scan is None:
            return _error(404, "unknown scan")
        done = asyncio.get_running_loop().time() >= scan.done_at
        return _json(
            {
                "scanId": scan.id,
                "status": "completed" if done else "running",
                "imageRef": scan.ref,
                "imageDigest": scan.digest if done else None,
            }
        )

    async def resolve(self, request: web.Request) -> web.Response:
        ref = request.query.get("ref", "")
        digest = self.catalog.refs.get(ref)
        if digest is None:
            return _error(404, f"unknown image ref {ref!r}")
        return _json({"ref": ref, "digest": digest})

    # ------------------------------------------------------------------ catalog

    async def post_sbom(self, request: web.Request) -> web.Response:
        try:
            up = msgspec.json.decode(await request.read(), type=SbomUpload)
            key, n = self.catalog.add_sbom(bytes(up.sbom))
        except (msgspec.DecodeError, SbomError) as exc:
            return _error(400, str(exc))
        self.catalog.add_image(up.digest, key, up.ref, up.attestation)
        return _json({"digest": up.digest, "sbomKey": key, "purls": n}, 201)

    async def post_images(self, request: web.Request) -> web.Response:
        try:
            up = msgspec.json.decode(await request.read(), type=ImagesUpload)
            for img in up.images:
                self.catalog.add_image(img.digest, img.sbom_key, img.ref)
        except (msgspec.DecodeError, KeyError) as exc:
            return _error(400, str(exc))
        return _json({"registered": len(up.images)}, 201)

    async def get_image(self, request: web.Request) -> web.Response:
        digest = request.match_info["digest"]
        key = self.catalog.sbom_of(digest, request.query.get("tenant"))
        if key is None:
            return _error(404, "unknown image")
        img = self.catalog.images.get(digest)  # a registered image may carry a tag
        ref = img.ref if img is not None and img.sbom_key == key else None
        return _json({"digest": digest, "sbomKey": key, "ref": ref})

    async def post_advisory(self, request: web.Request) -> web.Response:
        """Add or replace one OSV record (what a Feedser export would bring in)."""
        try:
            adv = parse_advisory(await request.read(), self.catalog.db.kev)
        except AdvisoryError as exc:
            return _error(400, str(exc))
        self.catalog.db.add(adv)
        self.catalog.db.reindex()
        return _json({"id": adv.id, "revision": self.catalog.db.revision}, 201)

    async def delete_advisory(self, request: web.Request) -> web.Response:
        """Withdraw one advisory (a feed retracting it)."""
        if self.catalog.db.advisories.pop(request.match_info["advisory_id"], None) is None:
            return _error(404, "unknown advisory")
        self.catalog.db.reindex()
        return _json({"revision": self.catalog.db.revision})

    async def reload(self, _request: web.Request) -> web.Response:
        db = await asyncio.to_thread(
            AdvisoryDb.load, self.osv_dir, self.kev_file, self.sources, self.epss_file
        )
        self.catalog.db = db
        return _json({"advisories": len(db.advisories), "revision": db.revision})

    # ------------------------------------------------------------------ admin

    async def get_faults(self, _request: web.Request) -> web.Response:
        return _json(self.faults.describe())

    async def set_faults(self, request: web.Request) -> web.Response:
        try:
            cfg = msgspec.json.decode(await request.read() or b"{}", type=FaultConfig)
        except msgspec.DecodeError as exc:
            return _error(400, str(exc))
        self.faults.apply(cfg)
        return _json(self.faults.describe())

    async def get_stats(self, _request: web.Request) -> web.Response:
        evals = self.evaluations
        return _json(
            {
                **self.stats,
                "images": len(self.catalog.images)
                + (self.catalog.indexed.count() if self.catalog.indexed is not None else 0),
                "registeredImages": len(self.catalog.images),
                "advisories": len(self.catalog.db.advisories),
                "revision": self.catalog.db.revision,
                "distinctKeys": len(evals),
                "maxEvaluationsPerKey": max(evals.values(), default=0),
                "faults": self.faults.describe()["injected"],
            }
        )

    async def healthz(self, _request: web.Request) -> web.Response:
        return _json({"status": "ok", "revision": self.catalog.db.revision})


async def start_scanner(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    osv_dir: Path | None = None,
    kev_file: Path | None = None,
    sources: Path | None = None,
    images: IndexedImages | None = None,
    faults: FaultConfig | None = None,
    epss_file: Path | None = None,
) -> ScannerService:
    """Start the reference scanner in this event loop; ``.url`` says where, ``.close()`` stops.
    ``images``: the catalog folded from the log (:meth:`IndexedImages.of` a System hosting
    the ``scanner`` role); without it the scanner knows registered images only."""
    db = await asyncio.to_thread(AdvisoryDb.load, osv_dir, kev_file, sources, epss_file)
    svc = ScannerService(
        db, faults=Faults(faults), osv_dir=osv_dir, kev_file=kev_file, sources=sources,
        images=images, epss_file=epss_file,
    )  # fmt: skip
    return await svc.start(host, port)
