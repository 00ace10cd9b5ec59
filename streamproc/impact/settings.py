"""The impact index's settings, read where a role that hosts it starts (and by ``streamproc
impact stats``), handed to :class:`ImpactProjection` as constructor arguments."""

from __future__ import annotations

from streamproc.config import Configuration
from streamproc.configfile.sections import Sections
from streamproc.impact.projection import ImpactProjection
from streamproc.runtime.batching import batch_time_from

MERGE_SHARE = 0.2
"""The share of the projector's batch-time bound a batch spends merging pending ids. Less
merging per batch means longer rounds, each product merged once for more images (measured
on 12,000 images of the benchmark catalog: 174 images/s at 0.2, 184 at 0.1 with twice the
ids left to merge at the end, 110 at 0.5, where every batch merged all of its own within
its share)."""


def cache_bytes_from(sections: Sections) -> int | None:
    """``impact.cache_mb`` (``STREAMPROC_IMPACT_CACHE_MB``) in bytes, from the typed
    ``[impact]`` section: 0 or less is None (unbounded)."""
    mb = sections.impact.cache_mb
    return None if mb <= 0 else mb * 1024 * 1024


def configured_projection(configuration: Configuration) -> ImpactProjection:
    """The impact index as a role hosts it: with the cache bound and warming of the typed
    ``[impact]`` section (the form ``Configured`` projection factories take), merging in
    each batch for ``MERGE_SHARE`` of the projector's batch-time bound
    (``projector.batch_max_s``, capped by the lease TTL)."""
    return ImpactProjection(
        max_bytes=configuration.built(cache_bytes_from),
        warm_on_start=configuration.sections.impact.warm_on_start,
        merge_budget_s=MERGE_SHARE * configuration.built(batch_time_from),
    )
