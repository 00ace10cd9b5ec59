"""A scanner tool as the runner's backend: the command line of each kind, the SBOM fetched
from the SBOM store, the tool's JSON parsed, and its data revision.

The command lines are fixed (docs/scanner.md): ``grype sbom:FILE -o json``,
``trivy sbom FILE --format json`` (``--server URL`` with ``scanner.trivy.server``),
``osv-scanner scan --sbom FILE --format json``, each followed by the configured extra
arguments. Nothing of a request reaches them: FILE is a name of ours.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from streamproc.backends.execute import ToolRunner
from streamproc.backends.model import ToolError, ToolReport
from streamproc.backends.parsers import parse_grype, parse_osv, parse_trivy
from streamproc.backends.purlmatch import SbomPurls
from streamproc.backends.settings import ToolSettings
from streamproc.sbom.parse import SbomError, parse_sbom

RESULTS: dict[str, tuple[int, ...]] = {"osv-scanner": (0, 1, 128)}
"""Exit statuses a tool answers with (any other is ``exit_status``). OSV-Scanner: 0 nothing
found, 1 vulnerabilities found, 128 no package it knows in the SBOM (nothing to match); Grype
and Trivy exit 0 unless given ``--fail-on`` / ``--exit-code``, which the extra arguments must
not add (streamproc's policy decides PASS/FAIL)."""
NO_PACKAGES = 128
REVISION_TTL_S = 60.0
"""How long a revision asked of the tool itself (Trivy's DB, OSV-Scanner's version) is kept."""
CACHE_BYTES = 64 * 1024 * 1024
"""SBOMs kept in memory by name (they never change: a name is a digest)."""


def argv(kind: str, s: ToolSettings, path: str) -> list[str]:
    """The tool's command line for the SBOM file at ``path``."""
    if kind == "grype":
        return [s.path, f"sbom:{path}", "-o", "json", *s.args]
    if kind == "trivy":
        server = ["--server", s.server] if s.server else []
        return [s.path, "sbom", path, "--format", "json", *server, *s.args]
    if kind == "osv-scanner":
        return [s.path, "scan", "--sbom", path, "--format", "json", *s.args]
    raise ValueError(f"not a tool kind: {kind}")


def version_argv(kind: str, s: ToolSettings) -> list[str]:
    if kind == "trivy":
        return [s.path, "version", "--format", "json"]
    return [s.path, "--version"]


def trivy_revision(raw: bytes, server: str | None = None) -> str:
    """``trivy version --format json``: the vulnerability DB's version and update time; with
    a ``trivy server`` the DB is the server's, which the local command cannot see."""
    try:
        doc = json.loads(raw)
    except ValueError:
        raise ToolError("unparseable_output", "trivy version printed no JSON") from None
    db = doc.get("VulnerabilityDB") or {}
    tool = doc.get("Version") or "?"
    if server:
        return f"trivy {tool} with the DB of the trivy server at {server}"
    if not db:
        return f"trivy {tool}, no local DB"
    return f"trivy-db v{db.get('Version', '?')} updated {db.get('UpdatedAt', '?')} (trivy {tool})"


def osv_version(raw: bytes) -> str:
    """``osv-scanner --version``: ``osv-scanner version: 2.0.2`` (first line)."""
    line = raw.decode(errors="replace").strip().splitlines()[:1]
    return line[0].rsplit(":", 1)[-1].strip() if line else "?"


class Tool:
    """One kind's tool, shared by the runner's lanes."""

    def __init__(
        self,
        kind: str,
        settings: ToolSettings,
        fetch: Callable[[str], Awaitable[bytes]],
    ) -> None:
        self.kind = kind
        self.s = settings
        self.fetch = fetch
        """``await fetch(name)``: the SBOM's bytes from the SBOM store."""
        self.runner = ToolRunner(settings.concurrency, settings.timeout_s)
        self._cache: OrderedDict[str, tuple[bytes, SbomPurls, str]] = OrderedDict()
        self._cached = 0
        self._revision: tuple[float, str] | None = None

    async def _sbom(self, name: str) -> tuple[bytes, SbomPurls, str]:
        hit = self._cache.get(name)
        if hit is not None:
            self._cache.move_to_end(name)
            return hit
        data = await self.fetch(name)
        try:
            doc = parse_sbom(data)
        except SbomError as exc:
            raise ToolError("sbom_missing", f"stored SBOM {name} does not parse: {exc}") from None
        filename = "sbom.cdx.json" if doc.format == "cyclonedx" else "sbom.spdx.json"
        entry = (data, SbomPurls(doc.purls), filename)
        self._cache[name] = entry
        self._cached += len(data)
        while self._cached > CACHE_BYTES and len(self._cache) > 1:
            _, (old, _, _) = self._cache.popitem(last=False)
            self._cached -= len(old)
        return entry

    async def revision(self) -> str:
        """What the tool says of its data (asked at most every :data:`REVISION_TTL_S`);
        empty for Grype, whose JSON names its DB."""
        if self.kind == "grype":
            return ""
        now = time.monotonic()
        if self._revision is not None and now - self._revision[0] < REVISION_TTL_S:
            return self._revision[1]
        out, _, _ = await self.runner.run(lambda _p: version_argv(self.kind, self.s), b"", "unused")
        rev = trivy_revision(out, self.s.server) if self.kind == "trivy" else osv_version(out)
        self._revision = (now, rev)
        return rev

    async def scan(self, sbom_name: str) -> tuple[ToolReport, float]:
        """The tool's report on the stored SBOM, and the seconds the tool ran."""
        data, purls, filename = await self._sbom(sbom_name)
        revision = await self.revision()
        out, elapsed, code = await self.runner.run(
            lambda p: argv(self.kind, self.s, p), data, filename, RESULTS.get(self.kind, (0,))
        )
        if self.kind == "osv-scanner" and code == NO_PACKAGES:
            return ToolReport([], f"osv-scanner {revision}", revision), elapsed
        if self.kind == "grype":
            return parse_grype(out, purls), elapsed
        if self.kind == "trivy":
            return parse_trivy(out, purls, revision), elapsed
        return parse_osv(out, purls, revision), elapsed
