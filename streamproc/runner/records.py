"""What the runner's projection stores, and the reads of it outside the fold.

The records (a run, a verdict, an image's latest findings, a run summary's vulnerability, a
schedule's notify rule and limits) and their keys are what :mod:`streamproc.runner.state`
folds into and what the completion reactor and the segment workers read back through
:class:`Reader`, never inside a fold.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from streamproc.events import payloads as p
from streamproc.names import (
    RUNNER_EXPORTS_CF,
    RUNNER_IMAGES_CF,
    RUNNER_OPEN_CF,
    RUNNER_RULES_CF,
    RUNNER_RUNS_CF,
    RUNNER_SUMMARY_CF,
    RUNNER_SUMMARY_IMAGES_CF,
    RUNNER_VERDICTS_CF,
)
from streamproc.runner.delta import FindingKey
from streamproc.state.store import Store

RUNS_CF = RUNNER_RUNS_CF
VERDICTS_CF = RUNNER_VERDICTS_CF
IMAGES_CF = RUNNER_IMAGES_CF
RULES_CF = RUNNER_RULES_CF
SUMMARY_CF = RUNNER_SUMMARY_CF
"""(tenant, run, vulnerability) → how many images it newly affects (``VulnAgg``)."""
SUMMARY_IMAGES_CF = RUNNER_SUMMARY_IMAGES_CF
"""(tenant, run, vulnerability, n) → the n-th of those images (the first ``SUMMARY_IMAGES``):
one small key each, so a batch of verdicts never rewrites a growing list."""
OPEN_CF = RUNNER_OPEN_CF
"""Runs not yet completed or cancelled: what the completion reactor looks at."""
EXPORTS_CF = RUNNER_EXPORTS_CF
"""(tenant, source, export ref[, revision past the first]) → the export's HLC time (ms),
until a run claims it."""
SEP = b"\x00"
SUMMARY_IMAGES = 1000
"""Digests kept per vulnerability in a run summary (the count is always exact)."""


def key(*parts: str) -> bytes:
    return SEP.join(x.encode() for x in parts)


def export_key(tenant: str, source: str, ref: str, revision: int) -> bytes:
    if revision == 1:
        return key(tenant, source, ref)
    return key(tenant, source, ref, str(revision))


class SegDone(msgspec.Struct, array_like=True):
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    dead_lettered: bool = False
    reason: str | None = None


class RunRec(msgspec.Struct, kw_only=True):
    tenant: str
    run_id: str
    trigger: str = "manual"
    schedule_ids: list[str] = []
    mode: str = "analysis-only"
    planned: bool = False
    plan: p.RunStats = msgspec.field(default_factory=p.RunStats)
    segments: dict[str, int] = {}
    """segment id → images, from run.planned."""
    done: dict[str, SegDone] = {}
    verdicts: dict[str, list[int]] = {}
    """segment id → [ok, failed] verdicts folded for it."""
    cancel_requested: bool = False
    cancel_reason: str | None = None
    terminal: str | None = None
    deltas: int = 0
    new_criticals: int = 0
    resolved: int | UnsetType = UNSET
    """Findings of the images' previous verdicts that a VEX claim dropped in this run (left
    out until there is one, so runs without VEX keep their bytes)."""
    failure_reasons: dict[str, int] = {}
    cause_ms: int = 0
    """HLC time (ms) of what caused the run: its earliest export, else its request."""

    def accounted(self) -> bool:
        return self.planned and all(s in self.done for s in self.segments)


class VerdictRec(msgspec.Struct, array_like=True):
    status: str
    segment_id: str
    delta: bool = False


class ImageRec(msgspec.Struct, array_like=True):
    findings: list[tuple[str, str, str, bool]] = []
    """(purl, vulnId, severity, kev) of the image's latest successful verdict."""


class VulnAgg(msgspec.Struct, kw_only=True):
    severity: str
    kev: bool
    count: int = 0
    epss: p.Epss | UnsetType = UNSET
    """The highest EPSS among the vulnerability's new findings in the run."""
    digests: list[str] = []
    """Filled by :meth:`Reader.summary` (stored apart, in ``SUMMARY_IMAGES_CF``)."""


class StoredNotify(msgspec.Struct, kw_only=True, rename="camel"):
    """A schedule's notify rule as this view stores it: its own keys (those schema-2 events
    had), so a renamed API or event field never changes the runner's state format."""

    on_new_findings: bool = True
    min_severity: p.Severity = "high"
    include_kev: bool = True

    @classmethod
    def of(cls, rule: p.NotifyRule) -> StoredNotify:
        return cls(
            on_new_findings=rule.on_new_findings,
            min_severity=rule.min_severity,
            include_kev=rule.include_kev,
        )

    def rule(self) -> p.NotifyRule:
        return p.NotifyRule(
            on_new_findings=self.on_new_findings,
            min_severity=self.min_severity,
            include_kev=self.include_kev,
        )


class Rule(msgspec.Struct, kw_only=True):
    notify: StoredNotify = msgspec.field(default_factory=StoredNotify)
    limits: p.Limits = msgspec.field(default_factory=p.Limits)


encode = msgspec.msgpack.Encoder().encode
decode_run = msgspec.msgpack.Decoder(RunRec).decode
decode_verdict = msgspec.msgpack.Decoder(VerdictRec).decode
decode_image = msgspec.msgpack.Decoder(ImageRec).decode
decode_vuln = msgspec.msgpack.Decoder(VulnAgg).decode
decode_rule = msgspec.msgpack.Decoder(Rule).decode


def failure_category(error: str | None) -> str:
    """``"timeout: no answer in 10 s"`` → ``"timeout"``; the coverage line groups by it."""
    if not error:
        return "scanner_error"
    head = error.split(":", 1)[0].strip()
    return head if head and len(head) <= 40 and " " not in head else "scanner_error"


class Reader:
    """Reads of committed state for the workers and reactors (never inside a fold)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _get(self, cf: str, k: bytes) -> bytes | None:
        return self.store.get(cf, k)

    def run(self, tenant: str, run_id: str) -> RunRec | None:
        raw = self._get(RUNS_CF, key(tenant, run_id))
        return decode_run(raw) if raw is not None else None

    def verdict(self, tenant: str, run_id: str, digest: str) -> VerdictRec | None:
        raw = self._get(VERDICTS_CF, key(tenant, run_id, digest))
        return decode_verdict(raw) if raw is not None else None

    def previous(self, tenant: str, digest: str) -> list[FindingKey] | None:
        raw = self._get(IMAGES_CF, key(tenant, digest))
        return decode_image(raw).findings if raw is not None else None

    def rule(self, tenant: str, schedule_id: str) -> Rule | None:
        raw = self._get(RULES_CF, key(tenant, schedule_id))
        return decode_rule(raw) if raw is not None else None

    def open_runs(self) -> list[RunRec]:
        out = []
        for k, _ in self.store.scan(OPEN_CF):
            raw = self._get(RUNS_CF, k)
            if raw is not None:
                out.append(decode_run(raw))
        return out

    def summary(self, tenant: str, run_id: str) -> dict[str, VulnAgg]:
        prefix = key(tenant, run_id) + SEP
        out = {
            k[len(prefix) :].decode(): decode_vuln(v)
            for k, v in self.store.scan(SUMMARY_CF, prefix)
        }
        for k, v in self.store.scan(SUMMARY_IMAGES_CF, prefix):
            vuln = k[len(prefix) :].rsplit(SEP, 1)[0].decode()
            out[vuln].digests.append(v.decode())  # in the order they were folded
        return out
