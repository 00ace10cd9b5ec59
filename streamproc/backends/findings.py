"""The one place every backend's findings pass through before a verdict is built, and the
policy that turns them into PASS or FAIL.

:func:`settle` takes what a backend reported (the reference scanner's ``/reports`` or a
tool's parsed JSON) and gives the findings the verdict records: one per (purl,
vulnerability), the highest severity kept, KEV marked from the configured catalog. The
runner's :func:`streamproc.runner.backend.settled` then applies the tenant's VEX claims to
them, and the policy decides on what stands.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from streamproc.backends.model import RawFinding
from streamproc.backends.osvrecord import SEVERITY_RANK, kev_ids


class KevCatalog:
    """CVE ids of a CISA KEV catalog file, read again when the file changes."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self._stamp: tuple[int, int] | None = None
        self.ids: frozenset[str] = frozenset()
        self.version = "none"

    def current(self) -> KevCatalog:
        """The catalog as the file says now. A file that is missing or does not parse lists
        nothing, and the policy revision says so (``kev=missing``, ``kev=unreadable``)."""
        if self.path is None:
            return self
        try:
            st = os.stat(self.path)
        except OSError:
            self.ids, self.version, self._stamp = frozenset(), "missing", None
            return self
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                doc = json.loads(self.path.read_bytes())
                self.ids = kev_ids(doc)
            except (OSError, ValueError, TypeError, KeyError, AttributeError):
                self.ids, self.version = frozenset(), "unreadable"
                return self
            self.version = str(doc.get("catalogVersion") or f"{len(self.ids)} CVEs")
        return self

    def listed(self, f: RawFinding) -> bool:
        return f.kev or f.vuln_id in self.ids or any(a in self.ids for a in f.aliases)


def settle(findings: Iterable[RawFinding], kev: KevCatalog) -> list[RawFinding]:
    """One finding per (purl, vulnerability id), with the highest severity any report gave
    it and KEV from the catalog (or the tool), ranked KEV first, then by severity."""
    best: dict[tuple[str, str], RawFinding] = {}
    for f in findings:
        listed = kev.listed(f)
        if listed != f.kev:
            f = dataclasses.replace(f, kev=listed)
        k = (f.purl, f.vuln_id)
        old = best.get(k)
        if old is None or SEVERITY_RANK[f.severity] > SEVERITY_RANK[old.severity]:
            best[k] = f
    return sorted(
        best.values(), key=lambda f: (not f.kev, -SEVERITY_RANK[f.severity], f.vuln_id, f.purl)
    )


@dataclass(frozen=True)
class Policy:
    """FAIL when a finding reaches ``fail_on`` or is known exploited; PASS otherwise."""

    fail_on: str = "high"

    def revision(self, kev: KevCatalog) -> str:
        return f"failOn={self.fail_on};kev={kev.version}"

    def decide(self, findings: Iterable[tuple[str, bool]]) -> str:
        """``findings``: (severity, kev) pairs."""
        floor = SEVERITY_RANK[self.fail_on]
        fail = any(k or SEVERITY_RANK[s] >= floor for s, k in findings)
        return "FAIL" if fail else "PASS"
