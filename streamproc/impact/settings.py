"""The impact index's settings, read where a role that hosts it starts (and by ``streamproc
impact stats``), handed to :class:`ImpactProjection` as constructor arguments."""

from __future__ import annotations

from streamproc.config import Configuration
from streamproc.configfile.sections import Sections
from streamproc.impact.projection import ImpactProjection


def cache_bytes_from(sections: Sections) -> int | None:
    """``impact.cache_mb`` (``STREAMPROC_IMPACT_CACHE_MB``) in bytes, from the typed
    ``[impact]`` section: 0 or less is None (unbounded)."""
    mb = sections.impact.cache_mb
    return None if mb <= 0 else mb * 1024 * 1024


def configured_projection(configuration: Configuration) -> ImpactProjection:
    """The impact index as a role hosts it: with the cache bound and warming of the typed
    ``[impact]`` section (the form ``Configured`` projection factories take)."""
    return ImpactProjection(
        max_bytes=configuration.built(cache_bytes_from),
        warm_on_start=configuration.sections.impact.warm_on_start,
    )
