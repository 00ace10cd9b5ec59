"""The impact index's settings, read where a role that hosts it starts (and by ``streamproc
impact stats``), handed to :class:`ImpactProjection` as constructor arguments."""

from __future__ import annotations

from collections.abc import Mapping

from streamproc.config import Configuration
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Sections
from streamproc.configfile.typed import flag
from streamproc.impact.projection import DEFAULT_CACHE_MB, ImpactProjection

CACHE_ENV = env_name("impact.cache_mb")
WARM_ENV = env_name("impact.warm_on_start")


def cache_bytes(env: Mapping[str, str]) -> int | None:
    """``STREAMPROC_IMPACT_CACHE_MB`` (``impact.cache_mb``) in bytes: default 640 MB,
    0 or less: None (unbounded)."""
    raw = env.get(CACHE_ENV, "").strip()
    mb = int(raw) if raw else DEFAULT_CACHE_MB
    return None if mb <= 0 else mb * 1024 * 1024


def warm_on_start(env: Mapping[str, str]) -> bool:
    """``STREAMPROC_IMPACT_WARM_ON_START`` (``impact.warm_on_start``): default true."""
    raw = env.get(WARM_ENV, "").strip().lower()
    if not raw:
        return True
    value = flag(raw)
    if value is None:
        raise ValueError(f"{WARM_ENV}={raw!r}: use true or false")
    return value


def cache_bytes_from(sections: Sections) -> int | None:
    """:func:`cache_bytes` from the typed ``[impact]`` section."""
    mb = sections.impact.cache_mb
    return None if mb <= 0 else mb * 1024 * 1024


def configured_projection(configuration: Configuration) -> ImpactProjection:
    """The impact index as a role hosts it: with the cache bound and warming of the typed
    ``[impact]`` section (the form ``Configured`` projection factories take)."""
    return ImpactProjection(
        max_bytes=configuration.built(cache_bytes_from),
        warm_on_start=configuration.sections.impact.warm_on_start,
    )
