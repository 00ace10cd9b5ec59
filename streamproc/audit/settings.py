"""Auditor settings, built from the process's typed ``[audit]`` section (the config file and
the environment, decoded once at start) with their checks (the shared Settings stay lean).

- ``STREAMPROC_AUDIT_BATCH_SIZE`` (1000): entries per signed batch snapshot.
- ``STREAMPROC_AUDIT_BATCH_INTERVAL_S`` (300): snapshot at least this often while entries wait.
- ``STREAMPROC_AUDIT_VERIFY_PERIOD_S`` (3600): full chain verification period (0: start-up only).
- ``STREAMPROC_AUDIT_VERIFY_ON_START`` (1): verify every chain when the auditor starts.
- ``STREAMPROC_AUDIT_MAX_CLOCK_SKEW_MS`` (``STREAMPROC_MAX_CLOCK_SKEW_MS``, 5000): entries whose
  HLC is further ahead of the auditor's clock are held (not snapshotted).

Keys are configured separately (see :mod:`streamproc.audit.signing`).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from streamproc.config import ConfigError, Settings
from streamproc.configfile.registry import env_names
from streamproc.configfile.sections import Sections
from streamproc.configfile.typed import SectionProblems, decode


class AuditSettings(msgspec.Struct, frozen=True, kw_only=True):
    batch_size: int = 1000
    batch_interval_s: float = 300.0
    verify_period_s: float = 3600.0
    verify_on_start: bool = True
    max_clock_skew_ms: int = 5_000

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 100_000:
            raise ConfigError(f"audit batch size {self.batch_size}: between 1 and 100000")
        if self.batch_interval_s <= 0:
            raise ConfigError(f"audit batch interval {self.batch_interval_s} s: must be > 0")
        if self.verify_period_s < 0:
            raise ConfigError(f"audit verify period {self.verify_period_s} s: must be >= 0")
        if self.max_clock_skew_ms < 0:
            raise ConfigError(f"audit max clock skew {self.max_clock_skew_ms} ms: must be >= 0")


ENV = env_names("audit", AuditSettings.__struct_fields__)
"""Field → environment name (the registry's ``audit.<field>`` keys)."""


def from_sections(settings: Settings | None, sections: Sections) -> AuditSettings:
    """Audit settings from the typed ``[audit]`` section; the skew, unset there, is the
    process-wide ``max_clock_skew_ms``."""
    audit = sections.audit
    raw: dict[str, object] = {f: getattr(audit, f) for f in AuditSettings.__struct_fields__}
    if audit.max_clock_skew_ms is None:
        if settings is None:
            del raw["max_clock_skew_ms"]  # AuditSettings' default, the process-wide one's
        else:
            raw["max_clock_skew_ms"] = settings.max_clock_skew_ms
    try:
        return msgspec.convert(raw, AuditSettings)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"audit settings: {exc}") from None


def load(settings: Settings | None, env: Mapping[str, str]) -> AuditSettings:
    """Audit settings from the text of ``env`` (environment names; ``config check`` and
    tests), decoded as at start."""
    try:
        return from_sections(settings, decode(env))
    except SectionProblems as exc:
        raise ConfigError(f"audit settings: {exc}") from None
