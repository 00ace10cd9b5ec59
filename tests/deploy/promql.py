"""PromQL checks shared by the alert-rule and dashboard tests: parse with a real PromQL
parser and resolve every metric and label name against the code's Prometheus registry."""

from __future__ import annotations

from typing import Any

import promql_parser as pq
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

TARGET_LABELS = {"job", "instance"}
"""Labels Prometheus adds to every scraped series."""
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def registered() -> dict[str, MetricWrapperBase]:
    """Every metric the code defines, by name (after importing every module that has one)."""
    # Importing the app imports every role, so every module that defines a metric.
    import streamproc.runtime.app  # noqa: F401

    return {
        c._name: c
        for c in list(REGISTRY._collector_to_names)  # type: ignore[attr-defined]
        if isinstance(c, MetricWrapperBase)
    }


def exposed() -> dict[str, set[str]]:
    """Series names as scraped (``…_total``, ``…_bucket``) → the labels they carry."""
    out: dict[str, set[str]] = {"up": set(TARGET_LABELS)}
    for name, m in registered().items():
        for suffix in SUFFIXES[m._type]:
            labels = set(m._labelnames) | TARGET_LABELS
            out[name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return out


def check(expr: str, known: dict[str, set[str]]) -> tuple[set[str], list[str]]:
    """Parse ``expr``; return the series names it reads and every problem found."""
    problems: list[str] = []
    names: set[str] = set()
    try:
        tree = pq.parse(expr)
    except ValueError as exc:
        return names, [f"not PromQL: {exc}"]

    def labels_of(node: Any) -> set[str]:
        """The labels the series of ``node`` may carry (checking names on the way)."""
        if isinstance(node, pq.VectorSelector):
            if node.name not in known:
                problems.append(f"unknown metric {node.name}")
                return set()
            names.add(node.name)
            allowed = known[node.name]
            matchers = list(node.matchers.matchers)
            for group in node.matchers.or_matchers:
                matchers.extend(group)
            for m in matchers:
                if m.name not in allowed:
                    problems.append(f"{node.name} has no label {m.name}")
            return allowed
        if isinstance(node, pq.MatrixSelector):
            return labels_of(node.vector_selector)
        if isinstance(node, (pq.ParenExpr, pq.UnaryExpr, pq.SubqueryExpr)):
            return labels_of(node.expr)
        if isinstance(node, pq.Call):
            out: set[str] = set()
            for arg in node.args:
                out |= labels_of(arg)
            return out
        if isinstance(node, pq.AggregateExpr):
            inner = labels_of(node.expr)
            if node.param is not None:
                labels_of(node.param)
            by = list(node.modifier.labels) if node.modifier is not None else []
            for label in by:
                if label not in inner:
                    problems.append(f"aggregation by {label}, which its input does not have")
            if node.modifier is not None and node.modifier.type == pq.AggModifierType.By:
                return set(by)
            return inner - set(by)
        if isinstance(node, pq.BinaryExpr):
            lhs, rhs = labels_of(node.lhs), labels_of(node.rhs)
            mod = node.modifier
            if mod is not None and mod.matching is not None:
                for label in mod.matching.labels:
                    if label not in lhs | rhs:
                        problems.append(f"matching on {label}, which neither side has")
            return lhs | rhs
        return set()  # number and string literals

    labels_of(tree)
    return names, problems
