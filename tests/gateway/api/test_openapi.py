"""The OpenAPI document: generated from the same Structs, checked in, served, self-consistent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from streamproc.gateway.api.openapi import document, render
from streamproc.gateway.api.routes import OPERATIONS
from tests.gateway.harness import Harness

CHECKED_IN = Path(__file__).resolve().parents[3] / "schemas" / "openapi.json"


def refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        own = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return own.union(*(refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(refs(v) for v in node))
    return set()


def test_checked_in_document_matches_the_code() -> None:
    assert CHECKED_IN.read_text() == render(), (
        "schemas/openapi.json is stale: python -m streamproc.gateway.api.openapi --out "
        "schemas/openapi.json"
    )


def test_every_reference_resolves_and_every_route_is_documented() -> None:
    doc = document(OPERATIONS)
    assert doc["openapi"] == "3.1.0"
    schemas = doc["components"]["schemas"]
    for ref in refs(doc):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in schemas, ref
    paths = doc["paths"]
    assert "/api/v1/scheduler/events/feedser-export" in paths
    assert "get" in paths["/api/v1/scheduler/chain/verify"], "answered by an auditor over NATS"
    for op in OPERATIONS:
        entry = paths[op.full_path][op.method.lower()]
        assert entry["responses"]["400"]["content"]["application/problem+json"]
        if op.body is not None and op.tag != "vex":  # a VEX document: its format's own schema
            ref = entry["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            assert schemas[ref.rsplit("/", 1)[1]]["additionalProperties"] is False
    assert len({op.operation_id for op in OPERATIONS}) == len(OPERATIONS)


async def test_served_document_is_the_generated_one(gw: Harness) -> None:
    status, body, headers = await gw.call("GET", "/openapi.json")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert body == msgspec.json.decode(render())


async def test_unknown_paths_and_methods_are_problem_documents(gw: Harness) -> None:
    status, problem, headers = await gw.call("GET", "/api/v1/scheduler/nothing")
    assert status == 404 and problem["status"] == 404
    assert headers["Content-Type"].startswith("application/problem+json")
    status, problem, headers = await gw.call("PUT", "/api/v1/scheduler/schedules")
    assert status == 405 and "POST" in headers["Allow"]
    status, _, _ = await gw.call("GET", "/api/v1/scheduler/chain/verify?tenantId=acme")
    assert status == 401  # a real route: authentication first
    status, body, _ = await gw.call("GET", "/healthz")
    assert status == 200 and body == {"status": "ok"}


def test_the_notify_feed_operations_are_listed_for_every_kind_with_their_schemas() -> None:
    doc = msgspec.json.decode(CHECKED_IN.read_bytes())
    schemas = doc["components"]["schemas"]
    for kind, payload in (("rescan.delta", "RescanDelta"), ("report.ready", "ReportReady"),
                          ("run.summary", "RunSummary")):  # fmt: skip
        get = doc["paths"][f"/api/v1/scheduler/feeds/{kind}/events"]["get"]
        assert get["x-required-scope"] == "scheduler.read"
        params = {p["name"]: p["schema"] for p in get["parameters"]}
        assert params["afterSeq"] == {"type": "integer", "minimum": 0, "default": 0}
        assert params["limit"] == {"type": "integer", "minimum": 1, "maximum": 500, "default": 100}
        assert params["streamEpoch"] == {"type": "integer", "minimum": 1}
        page = get["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        page_schema = schemas[page.rsplit("/", 1)[1]]
        assert page_schema["properties"]["epoch"]["type"] == "integer"
        event = page_schema["properties"]["events"]["items"]["$ref"].rsplit("/", 1)[1]
        assert schemas[event]["properties"]["payload"]["$ref"].endswith(f"/{payload}")
        assert {"409", "503", "401", "403"} <= set(get["responses"])
        post = doc["paths"][f"/api/v1/scheduler/feeds/{kind}/consumer-checkpoint"]["post"]
        body = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        props = schemas[body.rsplit("/", 1)[1]]["properties"]
        assert {"type": "integer", "minimum": 1} in props["streamEpoch"]["anyOf"]
        assert {"type": "integer", "minimum": 0} in props["seq"]["anyOf"]
        assert "notify.consumer_client_ids" in post["description"]
