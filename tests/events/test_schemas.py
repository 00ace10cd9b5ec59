"""Published contracts: JSON Schemas and stream configs committed in the repo equal the code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamproc.bus.streams import definitions, window_consumer
from streamproc.events.catalog import KINDS
from streamproc.events.envelope import encode
from streamproc.events.schemas import DIALECT, render, schema_for, write_all
from streamproc.gateway.auth.replay import default_bucket_definition
from streamproc.runner.ratebucket import definition as rate_bucket_definition

from .test_envelope import make

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = ROOT / "schemas" / "events"
STREAMS_DIR = ROOT / "deploy" / "nats" / "streams"
REGENERATE = "committed schemas differ from code: run `make schemas` and commit the result"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_has_a_schema(kind):
    s = schema_for(kind)
    assert s["$schema"] == DIALECT
    assert s["title"] == kind
    assert s["$id"] == f"urn:streamproc:event:{kind}:v{KINDS[kind].version}"
    assert s["properties"]["kind"] == {"const": kind}
    assert s["properties"]["schema"]["maximum"] == KINDS[kind].version
    assert set(s["required"]) >= {"id", "kind", "tenant", "hlc", "schema", "payload"}
    ref = s["properties"]["payload"]["$ref"]
    assert ref == f"#/$defs/{KINDS[kind].payload.__name__}"
    assert KINDS[kind].payload.__name__ in s["$defs"]
    assert "Envelope" not in s["$defs"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_committed_schema_equals_code(kind):
    path = SCHEMA_DIR / f"{kind}.json"
    assert path.exists(), f"{path.relative_to(ROOT)} is missing; {REGENERATE}"
    assert path.read_text() == render(kind), f"{path.relative_to(ROOT)}: {REGENERATE}"


def test_no_stale_committed_schemas():
    committed = {p.stem for p in SCHEMA_DIR.glob("*.json")}
    assert committed == set(KINDS), f"stale or missing schema files; {REGENERATE}"


def test_write_all_writes_every_kind_and_removes_stale(tmp_path):
    stale = tmp_path / "events" / "gone.kind.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    written = write_all(tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{k}.json" for k in KINDS)
    assert not stale.exists()
    for path in written:
        assert path.read_text() == render(path.name.removesuffix(".json"))


def test_render_is_deterministic_sorted_json():
    for kind in KINDS:
        text = render(kind)
        assert text.endswith("}\n")
        assert json.loads(text) == schema_for(kind)
        assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


# ---------------------------------------------------------------- stream configs


OPERATOR_DEFINITIONS = [
    *definitions("scheduler", 1),
    default_bucket_definition("scheduler", 1),
    rate_bucket_definition("scheduler", 1),
]


@pytest.mark.parametrize("d", OPERATOR_DEFINITIONS, ids=lambda d: d["name"])
def test_committed_stream_definitions_equal_code(d):
    path = STREAMS_DIR / f"{d['name']}.json"
    assert path.exists(), f"{path.relative_to(ROOT)} is missing; run `make schemas`"
    assert path.read_text() == json.dumps(d, indent=2) + "\n", (
        f"{path.relative_to(ROOT)} differs from streams.definitions(): run `make schemas`"
    )


WINDOW_FILE = STREAMS_DIR / "SCHEDULER_NOTIFY.notify-window.consumer.json"


def test_committed_window_consumer_equals_code():
    assert json.loads(WINDOW_FILE.read_text()) == window_consumer(), "run make schemas"


def test_no_stale_committed_stream_definitions():
    committed = {p.stem for p in STREAMS_DIR.glob("*.json")}
    assert committed == {d["name"] for d in OPERATOR_DEFINITIONS} | {WINDOW_FILE.stem}


# ---------------------------------------------------------------- samples vs. schemas


def _check_required(value: Any, schema: dict[str, Any], defs: dict[str, Any], where: str) -> None:
    """A minimal structural check: follows $ref/anyOf/properties/items and checks ``required``
    keys and ``const`` (what is asked of the samples when jsonschema is not installed)."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[1]]
    if "anyOf" in schema:
        errors = []
        for branch in schema["anyOf"]:
            try:
                _check_required(value, branch, defs, where)
                return
            except AssertionError as exc:
                errors.append(str(exc))
        raise AssertionError(f"{where}: no anyOf branch matches: {errors}")
    if "const" in schema:
        assert value == schema["const"], f"{where}: {value!r} != const {schema['const']!r}"
    kind = schema.get("type")
    if kind == "null":
        assert value is None, f"{where}: expected null"
    if kind == "object":
        assert isinstance(value, dict), f"{where}: expected an object, got {value!r}"
        missing = set(schema.get("required", ())) - value.keys()
        assert not missing, f"{where}: missing required {sorted(missing)}"
        props = schema.get("properties", {})
        for k, v in value.items():
            if k in props:
                _check_required(v, props[k], defs, f"{where}.{k}")
    if kind == "array":
        assert isinstance(value, list), f"{where}: expected an array"
        if "items" in schema and isinstance(schema["items"], dict):
            for i, item in enumerate(value):
                _check_required(item, schema["items"], defs, f"{where}[{i}]")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_sample_event_has_every_required_key(kind):
    schema = schema_for(kind)
    doc = json.loads(encode(make(kind)))
    _check_required(doc, schema, schema["$defs"], kind)
    payload_def = schema["$defs"][KINDS[kind].payload.__name__]
    assert set(payload_def.get("required", ())) <= doc["payload"].keys()
    assert set(doc["payload"]) <= set(payload_def["properties"]), "payload key not in schema"


def test_required_key_check_can_fail():
    schema = schema_for("schedule.paused")
    doc = json.loads(encode(make("schedule.paused")))
    del doc["payload"]["scheduleId"]
    with pytest.raises(AssertionError, match="scheduleId"):
        _check_required(doc, schema, schema["$defs"], "schedule.paused")


def test_sample_events_validate_with_jsonschema():
    jsonschema = pytest.importorskip("jsonschema")  # only if already installed
    for kind in sorted(KINDS):
        schema = schema_for(kind)
        validator = jsonschema.Draft202012Validator(schema)
        doc = json.loads(encode(make(kind)))
        validator.validate(doc)
        assert not validator.is_valid(dict(doc, kind="not." + kind))
