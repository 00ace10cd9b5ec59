"""Every Prometheus metric, defined once; roles expose the default registry on ``/metrics``."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, values

TRIGGERS = ("manual", "cron", "feedser", "vexer")
MODES = ("manual", "nightly", "event")
"""Label values known up front are created at import, so their series exist (at 0) before the
first event: ``rate()``, ``increase()`` and the alerts then see the very first increment."""


def _preset(metric: Counter | Gauge | Histogram, *values: str) -> None:
    for v in values:
        metric.labels(v)


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
REJECTED = Counter(
    "streamproc_rejected_events",
    "Events a projection refused to apply (e.g. an update of an unknown entity)",
    ["projection", "reason"],
)
LAST_APPLIED_SEQ = Gauge(
    "streamproc_projector_last_applied_sequence", "Last stream sequence committed", ["role"]
)
CONSUMER_LAG = Gauge(
    "streamproc_projector_lag_events",
    "Events of the role's kinds not applied yet (its consumer's pending)",
    ["role"],
)
BATCH_SECONDS = Histogram(
    "streamproc_projector_batch_seconds",
    "Fold + commit time of one batch",
    ["role"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
BATCH_EVENTS = Gauge(
    "streamproc_projector_batch_events",
    "Events the next batch folds at most: projector.batch, fewer while batches take longer "
    "than projector.batch_max_s",
    ["role"],
)
PUBLISHED = Counter("streamproc_published_events", "Events acknowledged by JetStream", ["result"])
PUBLISH_RETRIES = Counter("streamproc_publish_retries", "Publishes retried with the same id")
REPLAY_PROGRESS = Gauge("streamproc_replay_applied_sequence", "Replay position", ["role"])
MEMORY = Gauge(
    "streamproc_memory_bytes",
    "Where the process's memory is (read when scraped): rss, malloc_in_use, malloc_free "
    "(glibc's heap, freed but kept), rocksdb_memtables (every state directory it has open), "
    "rocksdb_block_cache and rocksdb_block_cache_pinned (one cache per process, index and "
    "filter blocks included)",
    ["part"],
)

CHAIN_ENTRIES = Counter(
    "scheduler_chain_entries", "Audit chain entries appended by the fold", ["tenant"]
)
CHAIN_VERIFICATIONS = Counter(
    "scheduler_chain_verifications", "Audit chain verifications run", ["tenant"]
)
CHAIN_VERIFICATION_FAILURES = Counter(
    "scheduler_chain_verification_failures", "Audit chain verifications that failed", ["tenant"]
)
BATCH_SNAPSHOTS = Counter(
    "scheduler_batch_snapshots", "Signed audit batch snapshots published", ["tenant"]
)

# ---------------------------------------------------------------- gateway (HTTP API, webhooks)
HTTP_REQUEST_SECONDS = Histogram(
    "scheduler_http_request_duration_seconds",
    "Gateway request latency, by route template, method and status",
    ["route", "method", "status"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
)
SCHEDULER_EVENTS = Counter(
    "scheduler_events",
    "Export webhook deliveries (feedser, vexer), image PUTs (images) and VEX document PUTs "
    "(vex) by result (accepted|duplicate|refused|failed)",
    ["source", "result"],
)

# ---------------------------------------------------------------- planner and cron
IMPACT_RESOLVE_SECONDS = Histogram(
    "scheduler_impact_resolve_seconds",
    "Impact resolution (index queries, dedupe, onlyIf) of one planned run, by mode",
    ["mode"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
PLAN_SECONDS = Histogram(
    "scheduler_plan_seconds",
    "Planning and publishing one run (run.planned, segments, work items), by mode",
    ["mode"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
RUN_LATENCY = Histogram(
    "scheduler_run_latency_seconds",
    "From the event that caused a run (export, cron tick, request) to the run's first "
    "verdict, by HLC times, by trigger",
    ["trigger"],
    buckets=(0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0),
)
IMAGES_SELECTED = Counter(
    "scheduler_images_selected", "Images selected by planned runs (after dedupe), by mode", ["mode"]
)
JOBS_ENQUEUED = Counter(
    "scheduler_jobs_enqueued", "Images enqueued in segments by planned runs, by mode", ["mode"]
)
RUNS_PLANNED = Counter(
    "scheduler_runs_planned", "Runs planned, by trigger and degraded", ["trigger", "degraded"]
)
PLANNER_BACKLOG = Gauge(
    "scheduler_planner_backlog_images",
    "Images spilled over maxJobs and waiting for their next window, per tenant",
    ["tenant"],
)
PLANNER_ERRORS = Counter(
    "scheduler_planner_errors",
    "Plans, ticks or SBOM retention passes that failed, by reason",
    ["reason"],
)
SBOMS_DELETED = Counter(
    "scheduler_sboms_deleted",
    "SBOMs the retention deleted from the SBOM store: `released` (no image uses it any more) "
    "or `unreferenced` (stored, but no indexed image ever named it)",
    ["reason"],
)
PLANNER_RECOVERY_FAILING = Gauge(
    "scheduler_planner_recovery_failing",
    "1 while the planner's restart check (re-queueing work items a crash left unpublished) "
    "fails or has given up; 0 once it succeeded",
)
PLANNER_REQUEUED = Counter(
    "scheduler_planner_requeued_work_items",
    "Work items the restart check published again (absent from the work queue after a crash)",
)
CRON_TICKS = Counter(
    "scheduler_cron_ticks", "Cron ticks by outcome (fired|late|skipped)", ["result"]
)

# ---------------------------------------------------------------- runner, scanner calls, Notify
DELTA_IMAGES = Counter(
    "scheduler_delta_images",
    "Images whose verdict got worse (a rescan.delta was sent), by highest new severity",
    ["severity"],
)
RATE_LIMITED = Counter(
    "scheduler_rate_limited",
    "Scanner calls backed off and retried (429|5xx|timeout|connection), or held back by a shared "
    "leaky bucket (run_rate|tenant_bucket|registry_bucket) or waiting for the buckets to answer "
    "(bucket_unavailable), by reason",
    ["reason"],
)
RATE_BUCKET_CALLS = Counter(
    "scheduler_rate_bucket_calls",
    "Requests to the shared rate buckets in JetStream KV, by outcome (granted: tokens taken|"
    "conflict: another runner wrote first|read|clock: server time measured|error)",
    ["outcome"],
)
SEGMENTS = Counter(
    "scheduler_runner_segments",
    "Segments handled by runners, by outcome (completed|cancelled|retried|dead_lettered)",
    ["outcome"],
)
SEGMENTS_DEAD_LETTERED = Counter(
    "scheduler_segments_dead_lettered",
    "Segments that exhausted max_deliver and were recorded as segment.failed(deadLettered)",
    ["tenant"],
)
RUNNER_ERRORS = Counter(
    "scheduler_runner_errors",
    "Scanner tool calls that gave no usable answer, by reason (missing_tool|timeout|"
    "exit_status|unparseable_output|sbom_missing); each is retried, and an image whose "
    "retries run out gets a failed verdict naming the reason",
    ["reason"],
)
VERDICTS = Counter("scheduler_verdicts", "Verdicts recorded by runners", ["status"])
SCANNER_CALL_SECONDS = Histogram(
    "scheduler_scanner_call_seconds",
    "Latency of successful scanner calls",
    ["endpoint"],
    buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
NOTIFY_MESSAGES = Counter(
    "scheduler_notify_messages", "Messages published to the Notify stream", ["kind"]
)

_preset(RUN_LATENCY, *TRIGGERS)
for _metric in (IMPACT_RESOLVE_SECONDS, PLAN_SECONDS, IMAGES_SELECTED, JOBS_ENQUEUED):
    _preset(_metric, *MODES)
_preset(CRON_TICKS, "fired", "late", "skipped")
_preset(PLANNER_ERRORS, "publish", "recovery", "unrecoverable_segments", "cron_publish")
_preset(PLANNER_ERRORS, "sbom_retention")
_preset(SBOMS_DELETED, "released", "unreferenced")
_preset(DELTA_IMAGES, "kev", "critical", "high", "other")
_preset(
    RATE_LIMITED,
    *("429", "5xx", "timeout", "connection"),
    *("run_rate", "tenant_bucket", "registry_bucket", "bucket_unavailable"),
)
_preset(RATE_BUCKET_CALLS, "granted", "conflict", "read", "clock", "error")
_preset(SEGMENTS, "completed", "cancelled", "retried", "dead_lettered", "invalid")
_preset(VERDICTS, "ok", "failed")
_preset(
    RUNNER_ERRORS, "missing_tool", "timeout", "exit_status", "unparseable_output", "sbom_missing"
)
_preset(NOTIFY_MESSAGES, "rescan.delta", "report.ready")

# ---------------------------------------------------------------- active/standby leases
LEASE_HELD = Gauge(
    "streamproc_lease_held", "1 while this process holds its role's lease (active)", ["role"]
)
LEASE_TAKEOVERS = Counter(
    "streamproc_lease_takeovers", "Times this process took its role's lease (active)", ["role"]
)

# ---------------------------------------------------------------- feeds
FEEDS_POLLS = Counter(
    "streamproc_feeds_polls",
    "Polls of the feeds role's OSV directory, by outcome",
    ["result"],
)
_preset(FEEDS_POLLS, "recorded", "unchanged", "failed")

# ---------------------------------------------------------------- read-model retention
RUNS_PRUNED = Counter(
    "scheduler_runs_pruned",
    "Finished runs removed from the read model by retention (counted once its batch commits)",
    ["tenant"],
)


# ---------------------------------------------------------------- hot-path updates
class LoopValue:
    """A sample's value without prometheus-client's lock, for a series that only one thread
    (the event loop's) updates: a scrape from any thread reads the float as it stands."""

    __slots__ = ("_exemplar", "_value")

    def __init__(self, value: float = 0.0) -> None:
        self._value = value
        self._exemplar: Any = None

    def inc(self, amount: float) -> None:
        self._value += amount

    def set(self, value: float, timestamp: float | None = None) -> None:
        self._value = value

    def set_exemplar(self, exemplar: Any) -> None:
        self._exemplar = exemplar

    def get(self) -> float:
        return self._value

    def get_exemplar(self) -> Any:
        return self._exemplar


def _unlocked(value: Any) -> Any:
    """``value`` swapped for a :class:`LoopValue` holding the same number; left as it is
    under prometheus-client's multiprocess mode (its values live in shared files)."""
    if type(value) is not values.MutexValue:
        return value
    return LoopValue(value._value)


def loop_counter(child: Counter) -> Callable[[], None]:
    """``child.inc`` for a labelled child updated on the event loop only: a plain float add
    (the per-request counters run it thousands of times a second)."""
    c: Any = child  # prometheus-client keeps a child's sample in its private _value
    value = c._value = _unlocked(c._value)
    if not isinstance(value, LoopValue):
        return child.inc

    def inc() -> None:
        value._value += 1.0

    return inc


def loop_gauge(gauge: Gauge) -> Callable[[float], None]:
    """``gauge.set`` for a gauge set on the event loop only."""
    g: Any = gauge
    value = g._value = _unlocked(g._value)
    if not isinstance(value, LoopValue):
        return gauge.set

    def set_(v: float) -> None:
        value._value = v

    return set_


def loop_histogram(child: Histogram) -> Callable[[float], None]:
    """``child.observe`` for a labelled child observed on the event loop only: one bisect
    over the bounds instead of a loop through them, and no locks."""
    h: Any = child
    if type(h._sum) is not values.MutexValue:
        return child.observe
    h._sum = total = _unlocked(h._sum)
    h._buckets = buckets = [_unlocked(b) for b in h._buckets]
    bounds = list(h._upper_bounds)  # ends with +Inf: every amount finds its bucket

    def observe(amount: float) -> None:
        total._value += amount
        buckets[bisect_left(bounds, amount)]._value += 1.0

    return observe
