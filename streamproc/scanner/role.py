"""The ``scanner`` role: the reference scanner's catalog."""

from __future__ import annotations

from streamproc.runtime.reactor import RoleSpec
from streamproc.scanner.images import ScannerImages

SCANNER = RoleSpec([ScannerImages])
"""The ``scanner`` role: the reference scanner's catalog (no reactors, no routes: the
scanner serves its own HTTP API on its own port)."""
