"""Planner settings, built from the process's typed ``[planner]`` section (the config file
and the environment, decoded once at start: :attr:`streamproc.config.Configuration.sections`),
with the derived fields (``debounce_ms``) and checks (the shared Settings stay lean).

Every knob, its variable and default (also in ``docs/planning.md``):

- ``STREAMPROC_PLANNER_DEBOUNCE_S`` (30): exports of one tenant and source whose HLC times fall
  within this window of the first one become one run (0: every export plans on its own).
- ``STREAMPROC_PLANNER_SEGMENT_SIZE`` (500): most images per segment (1..10000).
- ``STREAMPROC_PLANNER_DEFAULT_RATE`` (50): images/s of a run whose schedules set no
  ``limits.ratePerSecond``.
- ``STREAMPROC_PLANNER_DEFAULT_PARALLELISM`` (8): shards of a run without ``limits.parallelism``.
- ``STREAMPROC_PLANNER_MAX_JOBS_PER_RUN`` (50000): images per run at most — the ceiling no
  schedule's ``limits.maxJobs`` exceeds, and the limit of a run whose schedules set none.
- ``STREAMPROC_PLANNER_USAGE_ONLY`` (1): event-driven resolution counts only packages used by
  an entrypoint (schedules carry no per-schedule flag yet; this is the default for all).
- ``STREAMPROC_PLANNER_SPILL_DELAY_S`` (300): the "next window": a run's surplus over
  ``maxJobs`` is planned as a continuation run this long after the run was planned.
- ``STREAMPROC_PLANNER_MISSED_TICKS`` (latest): cron ticks missed while down: ``latest`` fires
  the latest one once, ``none`` fires none, ``all-capped`` fires each, at most the cap.
- ``STREAMPROC_PLANNER_MISSED_TICKS_CAP`` (10): most ticks fired at once by ``all-capped``.
- ``STREAMPROC_PLANNER_CLOCK_SKEW_S`` (60): a tick this late is still on time (not missed).
- ``STREAMPROC_PLANNER_DEGRADED_MAX_JOBS`` (10000): images per event-driven run while the
  impact index is not warm (only KEV and critical keys are resolved then).
- ``STREAMPROC_PLANNER_TENANT_RATE`` (200): images/s of one tenant's leaky bucket.
- ``STREAMPROC_PLANNER_REGISTRY_RATE`` (20): images/s per registry host (content-refresh).
- ``STREAMPROC_PLANNER_BURST_S`` (1): a bucket holds this many seconds of its rate as burst.
- ``STREAMPROC_PLANNER_MAX_RUNS_PER_PASS`` (16): runs planned per reactor pass, taken
  round-robin across tenants (the rest wait for the next pass).
- ``STREAMPROC_PLANNER_PREVIEW_SAMPLE`` (20): sample digests returned by a preview.
- ``STREAMPROC_PLANNER_EPSS_HIGH_PERCENTILE`` (0.9): a changed finding whose EPSS percentile
  is at least this ranks its images with the critical ones, and counts as high-EPSS.
- ``STREAMPROC_PLANNER_PARTITIONS`` (1): tenant partitions the planner processes share
  (:mod:`streamproc.planner.partitions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from streamproc.config import ConfigError
from streamproc.configfile.registry import env_names
from streamproc.configfile.sections import Sections
from streamproc.configfile.typed import SectionProblems, decode

MissedTicks = Literal["latest", "none", "all-capped"]


class PlannerSettings(msgspec.Struct, frozen=True, kw_only=True):
    debounce_s: float = 30.0
    segment_size: int = 500
    default_rate: int = 50
    default_parallelism: int = 8
    max_jobs_per_run: int = 50_000
    usage_only: bool = True
    spill_delay_s: float = 300.0
    missed_ticks: MissedTicks = "latest"
    missed_ticks_cap: int = 10
    clock_skew_s: float = 60.0
    degraded_max_jobs: int = 10_000
    tenant_rate: int = 200
    registry_rate: int = 20
    burst_s: float = 1.0
    max_runs_per_pass: int = 16
    preview_sample: int = 20
    epss_high_percentile: float = 0.9
    partitions: int = 1
    """Tenant partitions (:mod:`streamproc.planner.partitions`); 1: one planner plans all."""

    def __post_init__(self) -> None:
        checks = [
            (self.debounce_s >= 0, f"debounce {self.debounce_s} s: must be >= 0"),
            (1 <= self.segment_size <= 10_000, f"segment size {self.segment_size}: 1..10000"),
            (self.default_rate >= 1, f"default rate {self.default_rate}: must be >= 1"),
            (
                1 <= self.default_parallelism <= 1024,
                f"default parallelism {self.default_parallelism}: 1..1024",
            ),
            (self.max_jobs_per_run >= 1, f"max jobs per run {self.max_jobs_per_run}: >= 1"),
            (self.spill_delay_s >= 0, f"spill delay {self.spill_delay_s} s: must be >= 0"),
            (self.missed_ticks_cap >= 1, f"missed ticks cap {self.missed_ticks_cap}: >= 1"),
            (self.clock_skew_s >= 0, f"clock skew {self.clock_skew_s} s: must be >= 0"),
            (self.degraded_max_jobs >= 1, f"degraded max jobs {self.degraded_max_jobs}: >= 1"),
            (self.tenant_rate >= 1, f"tenant rate {self.tenant_rate}: must be >= 1"),
            (self.registry_rate >= 1, f"registry rate {self.registry_rate}: must be >= 1"),
            (0 < self.burst_s <= 3600, f"burst {self.burst_s} s: must be > 0 and <= 3600"),
            (self.max_runs_per_pass >= 1, f"max runs per pass {self.max_runs_per_pass}: >= 1"),
            (self.preview_sample >= 0, f"preview sample {self.preview_sample}: must be >= 0"),
            (
                0.0 <= self.epss_high_percentile <= 1.0,
                f"EPSS high percentile {self.epss_high_percentile}: 0..1",
            ),
            (1 <= self.partitions <= 256, f"partitions {self.partitions}: 1..256"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"planner {message}")

    @property
    def debounce_ms(self) -> int:
        return round(self.debounce_s * 1000)

    @property
    def spill_delay_ms(self) -> int:
        return round(self.spill_delay_s * 1000)

    @property
    def clock_skew_ms(self) -> int:
        return round(self.clock_skew_s * 1000)


ENV = env_names("planner", PlannerSettings.__struct_fields__)
"""Field → environment name (the registry's ``planner.<field>`` keys)."""


def from_sections(sections: Sections, **overrides: object) -> PlannerSettings:
    """Planner settings from the process's typed ``[planner]`` section (decoded once at start,
    bounds checked there), then ``overrides``; the checks of ``__post_init__`` run again."""
    raw = msgspec.structs.asdict(sections.planner)
    raw.update(overrides)
    try:
        return msgspec.convert(raw, PlannerSettings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"planner settings: {exc}") from None


def load(env: Mapping[str, str], **overrides: object) -> PlannerSettings:
    """Planner settings from the text of ``env`` (environment names; ``config check`` and
    tests), decoded as at start, then ``overrides``."""
    try:
        sections = decode(env)
    except SectionProblems as exc:
        raise ConfigError(f"planner settings: {exc}") from None
    return from_sections(sections, **overrides)
