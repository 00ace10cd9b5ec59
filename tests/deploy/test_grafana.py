"""``deploy/grafana/streamproc.json``: a valid dashboard whose every query is PromQL over
metrics and labels the code exposes, covering what an operator looks at first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.deploy.promql import check, exposed

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "streamproc.json"
VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m", "$job": ".*"}
"""Grafana substitutes these before the query reaches Prometheus."""
COVERED = {
    "streamproc_projector_lag_events",  # lag per role
    "streamproc_projector_last_applied_sequence",  # applied sequence
    "streamproc_projector_batch_seconds_bucket",  # batch latency
    "scheduler_events_total",  # events accepted / refused
    "scheduler_impact_resolve_seconds_bucket",  # impact resolve latency
    "scheduler_run_latency_seconds_bucket",  # run latency
    "scheduler_delta_images_total",  # deltas by severity
    "scheduler_rate_limited_total",  # rate limiting
    "scheduler_segments_dead_lettered_total",  # dead letters
    "streamproc_quarantined_events_total",  # quarantines
    "scheduler_chain_verification_failures_total",  # chain failures
}


def substitute(expr: str) -> str:
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unknown dashboard variable in {expr}"
    return expr


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows hold their panels
    return out


def test_the_dashboard_is_valid_and_reads_real_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert variables == {"datasource", "job"}
    known = exposed()
    ids: set[int] = set()
    read: set[str] = set()
    graphs = [p for p in panels(dash) if p["type"] != "row"]
    for p in panels(dash):
        assert p["id"] not in ids, p["title"]
        ids.add(p["id"])
        assert {"h", "w", "x", "y"} <= p["gridPos"].keys() and p["gridPos"]["x"] + p["gridPos"][
            "w"
        ] <= 24
    for p in graphs:
        assert p["title"] and p["targets"], p
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(set(refs)) == len(refs), p["title"]
        for t in p["targets"]:
            series, problems = check(substitute(t["expr"]), known)
            assert not problems, (p["title"], t["expr"], problems)
            assert series, (p["title"], t["expr"])
            read |= series
    assert read >= COVERED, COVERED - read
