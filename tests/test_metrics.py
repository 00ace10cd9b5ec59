"""``/metrics`` of a running system after a real end-to-end run: the seed's metric list and
the operational ones, with their labels."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import msgspec
import pytest
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from streamproc import metrics
from streamproc.config import Configuration
from streamproc.natsd.server import EmbeddedNats
from streamproc.roles import projections_for
from streamproc.runtime.deliveries import role_filter
from streamproc.runtime.projection import folded_kinds
from streamproc.scanner.demo import Demo
from streamproc.scanner.faults import FaultConfig
from tests.deploy.promql import registered
from tests.flows import EXPECTED_DELTAS, feedser_run

DOC = Path(__file__).resolve().parents[1] / "docs" / "observability.md"

SEED = {
    "scheduler_events": ("counter", {"source", "result"}),
    "scheduler_impact_resolve_seconds": ("histogram", {"mode"}),
    "scheduler_images_selected": ("counter", {"mode"}),
    "scheduler_jobs_enqueued": ("counter", {"mode"}),
    "scheduler_run_latency_seconds": ("histogram", {"trigger"}),
    "scheduler_delta_images": ("counter", {"severity"}),
    "scheduler_rate_limited": ("counter", {"reason"}),
}
OPERATIONAL = {
    "streamproc_projector_lag_events": ("gauge", {"role"}),
    "streamproc_projector_last_applied_sequence": ("gauge", {"role"}),
    "streamproc_projector_batch_seconds": ("histogram", {"role"}),
    "streamproc_quarantined_events": ("counter", {"role", "reason"}),
    "scheduler_segments_dead_lettered": ("counter", {"tenant"}),
    "streamproc_replay_applied_sequence": ("gauge", {"role"}),
}
ROLES = ("gateway", "planner", "runner", "scanner")


def receives(role: str) -> int:
    """How many of the two malformed messages reach ``role``'s projector: the one on an
    image subject if it folds an image kind; the one of no aggregate only with the whole log."""
    projections = projections_for(role, Configuration())
    kinds = folded_kinds(projections)
    whole = role_filter("p", projections) == ["p.events.>"]
    return int(bool(kinds & {"image.indexed", "image.removed"}) or whole) + int(whole)


def total(name: str, **labels: str) -> float:
    """Sum of a sample over the label values not given (0 when absent)."""
    out = 0.0
    for fam in REGISTRY.collect():
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                out += s.value
    return out


def test_every_metric_is_defined_once_with_its_labels() -> None:
    defined = {
        m._name: (m._type, set(m._labelnames))
        for m in vars(metrics).values()
        if isinstance(m, MetricWrapperBase)
    }
    for name, want in {**SEED, **OPERATIONAL}.items():
        assert defined.get(name) == want, name


def test_every_registered_metric_is_documented_with_its_type_and_labels() -> None:
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    for name, m in registered().items():
        shown = f"{name}_total" if m._type == "counter" else name
        assert shown in rows, f"{shown} is missing from docs/observability.md"
        _, kind, labels, meaning = rows[shown]
        assert kind == m._type, shown
        want = ", ".join(f"`{x}`" for x in m._labelnames) or "—"
        assert labels == want, (shown, labels, want)
        assert meaning, shown


async def test_metrics_after_an_end_to_end_run(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {
        "deltas": total("scheduler_delta_images_total"),
        "429": total("scheduler_rate_limited_total", reason="429"),
        "latency": total("scheduler_run_latency_seconds_count", trigger="feedser"),
        "accepted": total("scheduler_events_total", source="feedser", result="accepted"),
        "quarantined": total("streamproc_quarantined_events_total"),
    }

    async def throttle(demo: Demo) -> None:
        """The scanner answers the first call with 429: a backed-off, retried call."""
        body = msgspec.json.encode(FaultConfig(next_429=1))
        url = f"{demo.scanner_url}/admin/faults"
        async with aiohttp.ClientSession() as s, s.post(url, data=body) as r:
            assert r.status == 200

    async with feedser_run(nats_server, prefix, tmp_path, monkeypatch, throttle) as flow:
        system = flow.system
        assert system.publisher is not None
        # Malformed messages on the log: each role whose filter matches the subject
        # quarantines it and goes on — one on an image subject, one of no aggregate at all.
        await system.publisher.publish(f"{prefix}.events.demo.image.x", b"{", "junk-1")
        ack = await system.publisher.publish(f"{prefix}.events.demo.junk.x", b"{", "junk-2")
        for p in system.projectors.values():
            await p.wait_for(ack.seq)
        assert system.heartbeat is not None
        await system.heartbeat.beat()  # the lag gauge is refreshed with each heartbeat
        async with aiohttp.ClientSession() as s, s.get(f"{system.ops_url}/metrics") as r:
            assert r.status == 200
            text = await r.text()

    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, (kind, labels) in {**SEED, **OPERATIONAL}.items():
        fam = families.get(name)
        assert fam is not None, f"{name} is not exposed"
        assert fam.type == kind, name
        for sample in fam.samples:
            assert set(sample.labels) - {"le"} == labels, (name, sample)

    def value(name: str, **labels: str) -> float:
        return sum(
            s.value
            for f in families.values()
            for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    # The seed's list, moved by this run.
    assert value("scheduler_events_total", source="feedser", result="accepted") > before["accepted"]
    assert value("scheduler_impact_resolve_seconds_count", mode="event") >= 1
    assert value("scheduler_images_selected_total", mode="event") >= EXPECTED_DELTAS
    assert value("scheduler_jobs_enqueued_total", mode="event") >= EXPECTED_DELTAS
    assert value("scheduler_delta_images_total") - before["deltas"] == EXPECTED_DELTAS
    assert value("scheduler_rate_limited_total", reason="429") - before["429"] >= 1
    count = value("scheduler_run_latency_seconds_count", trigger="feedser")
    assert count - before["latency"] == 1  # one run, one first verdict
    assert 0 < value("scheduler_run_latency_seconds_sum", trigger="feedser") < 60
    # Operational: every role's position, lag and batch time; the quarantine.
    for role in ROLES:
        assert value("streamproc_projector_last_applied_sequence", role=role) >= ack.seq
        assert value("streamproc_projector_lag_events", role=role) == 0
        assert value("streamproc_projector_batch_seconds_count", role=role) >= 1
        got = value("streamproc_quarantined_events_total", role=role, reason="malformed_json")
        assert got >= receives(role), role
    expected = sum(receives(role) for role in ROLES)
    assert value("streamproc_quarantined_events_total") - before["quarantined"] == expected
    assert expected == len(ROLES)  # each folds an image kind; the second reaches none of them
