"""Every Prometheus metric, defined once; roles expose the default registry on ``/metrics``."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

HLC_TICKS = Counter("hlc_ticks", "HLC timestamps issued (send or receive)")
HLC_SKEW_REJECTIONS = Counter(
    "hlc_clock_skew_rejections", "Remote HLC timestamps refused for being too far ahead"
)
HLC_OFFSET = Gauge("hlc_physical_offset_seconds", "HLC physical time minus the wall clock")

EVENTS_APPLIED = Counter(
    "streamproc_projector_events", "Events handled by a projector", ["role", "result"]
)
QUARANTINED = Counter(
    "streamproc_quarantined_events", "Events quarantined as malformed", ["role", "reason"]
)
LAST_APPLIED_SEQ = Gauge(
    "streamproc_projector_last_applied_sequence", "Last stream sequence committed", ["role"]
)
CONSUMER_LAG = Gauge(
    "streamproc_projector_lag_events", "Stream last sequence minus last applied", ["role"]
)
BATCH_SECONDS = Histogram(
    "streamproc_projector_batch_seconds",
    "Fold + commit time of one batch",
    ["role"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
PUBLISHED = Counter("streamproc_published_events", "Events acknowledged by JetStream", ["result"])
PUBLISH_RETRIES = Counter("streamproc_publish_retries", "Publishes retried with the same id")
REPLAY_PROGRESS = Gauge("streamproc_replay_applied_sequence", "Replay position", ["role"])
