"""``deploy/prometheus``: the alert rules parse as PromQL, read metrics and labels the code
really exposes, carry a severity and a runbook that exists; promtool checks and unit-tests
them when it is installed (Debian's ``prometheus`` package)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.promql import check, exposed

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "deploy" / "prometheus"
DOC = ROOT / "docs" / "observability.md"
REQUIRED = {
    "StreamprocConsumerLag",
    "StreamprocQuarantinedEvents",
    "StreamprocSegmentsDeadLettered",
    "StreamprocChainVerificationFailed",
    "HlcClockSkewExceeded",
    "StreamprocTenantBacklog",
    "StreamprocRoleDown",
    "StreamprocProjectorStalled",
    "StreamprocPlannerRecoveryFailing",
}
SEVERITIES = {"critical", "warning"}
DURATION = re.compile(r"^\d+[smhd]$")


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((DIR / "alerts.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to dashes."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"^#{1,6} (.+)$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def test_every_alert_is_complete_and_reads_real_metrics() -> None:
    known = exposed()
    docs = anchors(DOC.read_text())
    found = set()
    for rule in rules():
        name = rule["alert"]
        found.add(name)
        assert DURATION.match(str(rule.get("for", "0s"))), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        ann = rule["annotations"]
        assert ann["summary"] and ann["description"], name
        page, _, anchor = ann["runbook_url"].partition("#")
        assert page == "docs/observability.md" and anchor == name.lower(), name
        assert anchor in docs, f"{name}: no '{name}' section in docs/observability.md"
        series, problems = check(rule["expr"], known)
        assert not problems, (name, problems)
        assert series, name
    assert found >= REQUIRED


def test_the_checker_catches_mistakes() -> None:
    """The checks above would fail on a wrong name, label or syntax (they can fail)."""
    known = exposed()
    assert check("streamproc_projector_lag_events{role='x'} > 5", known)[1] == []
    assert check("streamproc_projector_lag > 5", known)[1] == [
        "unknown metric streamproc_projector_lag"
    ]
    assert check("scheduler_events_total{tenant='a'}", known)[1] == [
        "scheduler_events_total has no label tenant"
    ]
    assert check("sum by (role) (scheduler_events_total)", known)[1] == [
        "aggregation by role, which its input does not have"
    ]
    assert check("sum(rate(scheduler_events_total[5m])", known)[1][0].startswith("not PromQL")


promtool = shutil.which("promtool")


@pytest.mark.skipif(promtool is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_checks_and_unit_tests_the_rules() -> None:
    assert promtool is not None
    for args in (
        ["check", "rules", "alerts.yml"],
        ["check", "config", "prometheus.yml"],
        ["test", "rules", "alerts_test.yml"],
    ):
        out = subprocess.run(
            [promtool, *args], cwd=DIR, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stdout + out.stderr
