"""Calling the scanner: per-call timeout, backoff with jitter, ``Retry-After``, idempotency.

A 429, a 5xx, a timeout or a broken connection is transient: the call is retried with the
same ``Idempotency-Key`` after an exponential backoff with full jitter, never sooner than
the server's ``Retry-After`` — which also holds back every other call of this client, so a
throttled scanner is not hammered by the other calls in flight. A call given a ``pace``
awaits it before every attempt, retries included (the shared rate buckets,
:mod:`streamproc.runner.pacing`); time spent there does not count against the budget.
Other 4xx answers fail only that image (:class:`ImageFailed`); transient failures beyond
the image's budget raise :class:`ScannerUnavailable`, which fails the attempt of the whole
segment (it is retried later by redelivery, and dead-lettered after ``max_deliver``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import msgspec

from streamproc import metrics
from streamproc.events import payloads as p
from streamproc.runner.http1 import Http1Pool, HttpError


class ImageFailed(Exception):
    """The scanner refused this image (e.g. 404 unknown image): not worth retrying."""


class ScannerUnavailable(Exception):
    """Transient failures outlasted the retry budget: the scanner is unhealthy."""


class Epss(msgspec.Struct, kw_only=True):
    score: float
    percentile: float
    date: str | None = None


class Finding(msgspec.Struct, kw_only=True, rename="camel"):
    purl: str
    vuln_id: str
    severity: str
    kev: bool = False
    link: str | None = None
    aliases: list[str] = []
    fixed_version: str | None = None
    epss: Epss | None = None


class Attestation(msgspec.Struct, kw_only=True, rename="camel"):
    uuid: str
    verified: bool = False


class ScanReport(msgspec.Struct, kw_only=True, rename="camel"):
    """The part of a ``/reports`` answer the runner reads (other fields are ignored)."""

    image_digest: str
    findings: list[Finding] = []
    report_url: str | None = None
    attestation: Attestation | None = None
    advisories_revision: str | None = None
    """What the findings were evaluated against (a tool's DB revision, for the tool kinds)."""
    policy_revision: str | None = None
    verdict: str | None = None
    """``PASS`` or ``FAIL`` when the backend's own policy decided; else the runner's does."""
    suppressed: list[p.Suppressed] = []
    """Findings the tenant's VEX claims dropped: set by ``settled`` (whatever a backend's
    answer says here is replaced)."""
    vex_documents: list[p.VexApplied] = []
    """The VEX documents whose claims matched a finding: set by ``settled`` likewise."""


Pace = Callable[[], Awaitable[None]]
"""Awaited before each attempt of a call: returns when the call may go out."""
IDEMPOTENCY_KEY = "Idempotency-Key"
_report = msgspec.json.Decoder(ScanReport)
_SEVERITIES = frozenset({"low", "medium", "high", "critical"})


def retry_after_s(value: str | None) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class ScannerClient:
    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 10.0,
        attempts: int = 8,
        backoff_base_s: float = 0.1,
        backoff_cap_s: float = 5.0,
        budget_s: float = 60.0,
        connections: int = 128,
        rng: random.Random | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.base = backoff_base_s
        self.cap = backoff_cap_s
        self.budget_s = budget_s
        self.connections = connections
        self.rng = rng or random.Random()
        self._session: aiohttp.ClientSession | None = None
        self._pool = (
            Http1Pool(self.base_url, connections) if self.base_url.startswith("http://") else None
        )
        self._not_before = 0.0
        self._latency = metrics.SCANNER_CALL_SECONDS.labels("reports")

    async def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections, ttl_dns_cache=300),
                timeout=self.timeout,
            )
        return self._session

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = self.rng.uniform(0, min(self.cap, self.base * (2**attempt)))
        if retry_after is not None:
            delay = max(delay, retry_after + self.rng.uniform(0, 0.05))
        return delay

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        key: str | None = None,
        pace: Pace | None = None,
    ) -> tuple[bytes, float, int]:
        """(answer body, latency of the successful attempt, retries) or an exception."""
        headers = {"Content-Type": "application/json"}
        if key:
            headers[IDEMPOTENCY_KEY] = key
        data = msgspec.json.encode(body) if body is not None else None
        deadline = time.monotonic() + self.budget_s
        retries = 0
        last = ""
        for attempt in range(self.attempts):
            wait = self._not_before - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if pace is not None:
                paced = time.monotonic()
                await pace()
                deadline += time.monotonic() - paced
            t0 = time.perf_counter()
            retry_after: float | None = None
            try:
                status, raw, ra = await self._send(method, path, data, headers)
                retry_after = retry_after_s(ra)
            except TimeoutError:
                reason, last = "timeout", f"timeout: no answer within {self.timeout_s:g} s"
            except (aiohttp.ClientError, OSError, HttpError) as exc:
                reason, last = "connection", f"connection: {type(exc).__name__}: {exc}"[:300]
            else:
                elapsed = time.perf_counter() - t0
                if status < 300:
                    return raw, elapsed, retries
                if status == 429 or status >= 500:
                    reason = "429" if status == 429 else "5xx"
                    last = f"http_{status}: {raw[:200].decode(errors='replace')}"
                    if retry_after is not None:
                        self._not_before = max(self._not_before, time.monotonic() + retry_after)
                else:
                    detail = raw[:300].decode(errors="replace")
                    raise ImageFailed(f"http_{status}: {detail}")
            metrics.RATE_LIMITED.labels(reason).inc()
            delay = self._backoff(attempt, retry_after)
            if attempt + 1 >= self.attempts or time.monotonic() + delay > deadline:
                break
            retries += 1
            await asyncio.sleep(delay)
        raise ScannerUnavailable(f"{last} (after {retries + 1} attempts)")

    async def _send(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes, str | None]:
        """(status, body, Retry-After) over the lean pool, or aiohttp for https."""
        if self._pool is not None:
            async with asyncio.timeout(self.timeout_s):
                status, head, raw = await self._pool.request(method, path, headers, data or b"")
            return status, raw, head.get("retry-after")
        session = await self.session()
        async with session.request(method, self.base_url + path, data=data, headers=headers) as r:
            return r.status, await r.read(), r.headers.get("Retry-After")

    async def report(
        self,
        digest: str,
        key: str,
        policy_revision: str | None = None,
        tenant: str | None = None,
        pace: Pace | None = None,
    ) -> tuple[ScanReport, float, int]:
        """The image's report; ``tenant`` says whose image it is (a scanner that keeps SBOMs
        per tenant needs it)."""
        body: dict[str, Any] = {"imageDigest": digest}
        if tenant:
            body["tenant"] = tenant
        if policy_revision:
            body["policyRevision"] = policy_revision
        raw, elapsed, retries = await self._call("POST", "/reports", body, key, pace)
        try:
            report = _report.decode(raw)
        except msgspec.DecodeError as exc:  # ValidationError included
            raise ImageFailed(f"invalid_report: {exc}") from None
        for f in report.findings:
            if f.severity not in _SEVERITIES:
                raise ImageFailed(f"invalid_report: severity {f.severity!r} of {f.vuln_id}")
        self._latency.observe(elapsed)
        return report, elapsed, retries

    async def _json(
        self,
        method: str,
        path: str,
        body: Any = None,
        key: str | None = None,
        pace: Pace | None = None,
    ) -> tuple[dict[str, Any], int]:
        """(JSON object answered, retries)."""
        raw, _, retries = await self._call(method, path, body, key, pace)
        try:
            doc = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise ImageFailed(f"invalid_answer: {method} {path}: {exc}") from None
        if not isinstance(doc, dict):
            raise ImageFailed(f"invalid_answer: {method} {path}: not a JSON object")
        return doc, retries

    async def refresh(
        self, digest: str, key: str, poll_s: float = 0.05, registry: Pace | None = None
    ) -> tuple[str, int]:
        """Content refresh: resolve the image's tag; if it moved, scan the new content and
        wait for it. Returns (the digest to report on, retries). The calls that reach the
        registry (resolving, scanning) await ``registry`` first."""
        image, r1 = await self._json("GET", f"/images/{digest}")
        ref = image.get("ref")
        if not ref:
            return digest, r1
        resolved, r2 = await self._json("GET", f"/resolve?ref={ref}", pace=registry)
        current = resolved.get("digest") or digest
        if current == digest:
            return digest, r1 + r2
        scan, r3 = await self._json(
            "POST", "/scans", {"imageRef": ref}, key + ":scan", pace=registry
        )
        deadline = time.monotonic() + self.budget_s
        while True:
            state, _ = await self._json("GET", f"/scans/{scan['scanId']}")
            if state.get("status") == "completed":
                return state.get("imageDigest") or current, r1 + r2 + r3
            if state.get("status") == "failed":
                raise ImageFailed(f"scan_failed: {state.get('error', 'scan failed')}")
            if time.monotonic() > deadline:
                raise ScannerUnavailable(f"timeout: scan of {ref} did not complete")
            await asyncio.sleep(poll_s)
