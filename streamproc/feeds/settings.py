"""``feeds`` settings, built from the process's typed ``[feeds]`` section (the config file
and the environment, decoded once at start) with their checks.

- ``STREAMPROC_FEEDS_OSV_DIR`` (unset): the OSV directory watched; unset, the role records
  nothing (and says so).
- ``STREAMPROC_FEEDS_TENANTS``: the tenants each export is recorded for.
- ``STREAMPROC_FEEDS_POLL_INTERVAL_S`` (60, 1 to 86400): seconds between two reads.
- ``STREAMPROC_FEEDS_KEV_FILE``, ``STREAMPROC_FEEDS_EPSS_FILE``,
  ``STREAMPROC_FEEDS_DEBIAN_SOURCES``: what ``streamproc feedser export`` takes as ``--kev``,
  ``--epss`` and ``--debian-sources``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import msgspec

from streamproc.config import ConfigError
from streamproc.configfile.registry import env_names
from streamproc.configfile.sections import Sections
from streamproc.configfile.typed import SectionProblems, decode
from streamproc.ids import validate_tenant


class FeedsSettings(msgspec.Struct, frozen=True, kw_only=True):
    osv_dir: str | None = None
    tenants: list[str] = []
    poll_interval_s: float = 60.0
    kev_file: str | None = None
    epss_file: str | None = None
    debian_sources: str | None = None

    def __post_init__(self) -> None:
        """What the registry's per-key bounds cannot say (they bound the interval)."""
        if self.osv_dir and not self.tenants:
            raise ConfigError("feeds.tenants: at least one tenant when feeds.osv_dir is set")
        for tenant in self.tenants:
            try:
                validate_tenant(tenant)
            except ValueError as exc:
                raise ConfigError(f"feeds.tenants: {exc}") from None

    def path(self, name: str) -> Path | None:
        value = getattr(self, name)
        return Path(value) if value else None


ENV = env_names("feeds", FeedsSettings.__struct_fields__)
"""Field → environment name (the registry's ``feeds.<field>`` keys)."""


def from_sections(sections: Sections) -> FeedsSettings:
    """Feeds settings from the typed ``[feeds]`` section."""
    feeds = sections.feeds
    raw = {f: getattr(feeds, f) for f in FeedsSettings.__struct_fields__}
    try:
        return msgspec.convert(raw, FeedsSettings)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"feeds settings: {exc}") from None


def load(env: Mapping[str, str]) -> FeedsSettings:
    """Feeds settings from the text of ``env`` (environment names; ``config check`` and
    tests), decoded as at start."""
    try:
        return from_sections(decode(env))
    except SectionProblems as exc:
        raise ConfigError(f"feeds settings: {exc}") from None
