"""Envelope codec: roundtrip of every kind, refusals with named reasons, upcasting, new_event."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from streamproc.events import payloads as p
from streamproc.events.catalog import KINDS
from streamproc.events.envelope import Envelope, EventError, decode, encode, new_event
from streamproc.hlc import Timestamp
from streamproc.ids import InvalidTenant

DIGEST = "sha256:" + "ab" * 32
DIGEST2 = "sha256:" + "cd" * 32
HEX64 = "0f" * 32


def sample_payloads() -> dict[str, p.Payload]:
    """One valid payload per kind, with non-default values wherever there is a field."""
    selection = p.Selection(
        scope="by-namespace",
        namespaces=["prod"],
        repositories=["reg/app"],
        digests=[DIGEST],
        labels=["team=core"],
        include_tags=["latest"],
        resolves_tags=True,
    )
    stats = p.RunStats(
        candidates=10,
        deduped=1,
        queued=9,
        spilled=0,
        completed=7,
        failed=1,
        cancelled=1,
        deltas=3,
        new_criticals=2,
    )
    finding = p.Finding(
        purl="pkg:npm/a@1", vuln_id="CVE-2024-1", severity="critical", kev=True, link="https://x"
    )
    return {
        "schedule.created": p.ScheduleCreated(
            schedule_id="sch-1",
            name="Nightly",
            enabled=False,
            cron="0 2 * * *",
            timezone="Europe/Berlin",
            mode="content-refresh",
            selection=selection,
            only_if=p.OnlyIf(last_report_older_than_days=3, policy_revision="r7"),
            notify=p.NotifyRule(on_new_findings=False, min_severity="critical", include_kev=False),
            limits=p.Limits(max_jobs=100, rate_per_second=5, parallelism=4),
            subscriptions=["vexer"],
            created_by="alice",
        ),
        "schedule.updated": p.ScheduleUpdated(
            schedule_id="sch-1",
            name="Hourly",
            cron="0 * * * *",
            timezone="UTC",
            limits=p.Limits(parallelism=2),
            updated_by="bob",
        ),
        "schedule.paused": p.ScheduleStateChange(schedule_id="sch-1", by="bob", reason="maint"),
        "schedule.resumed": p.ScheduleStateChange(schedule_id="sch-1", by="bob"),
        "schedule.deleted": p.ScheduleStateChange(schedule_id="sch-1", reason="gone"),
        "export.feedser": p.FeedserExport(
            export_id="fx-1",
            changed_product_keys=["pkg:npm/a", "pkg:pypi/b"],
            kev=["CVE-2024-1"],
            window=p.Window(from_="2024-01-01T00:00:00Z", to="2024-01-02T00:00:00Z"),
            advisories=[
                p.AdvisoryChange(
                    vuln_id="CVE-2024-1", product_keys=["pkg:npm/a"], severity="high", kev=True
                )
            ],
        ),
        "export.vexer": p.VexerExport(
            export_id="vx-1",
            changed_claims=[
                p.ChangedClaim(product_key="pkg:npm/a", vuln_id="CVE-1", status="affected→fixed"),
                p.ChangedClaim(
                    product_key="pkg:npm/b", vuln_id="CVE-2", status="under_investigation -> fixed"
                ),
            ],
            window=p.Window(to="2024-01-02T00:00:00Z"),
        ),
        "image.indexed": p.ImageIndexed(
            digest=DIGEST,
            registry="reg.example.com",
            repository="team/app",
            namespace="prod",
            tags=["1.0", "latest"],
            labels={"team": "core", "empty": ""},
            components=[
                p.Component(purl="pkg:npm/a@1", product_key="pkg:npm/a", used=True),
                p.Component(purl="pkg:pypi/b@2", product_key="pkg:pypi/b"),
            ],
        ),
        "image.removed": p.ImageRemoved(digest=DIGEST, reason="deleted upstream"),
        "sbom.deleted": p.SbomDeleted(sbom="sha256:" + "ab" * 32, released_by="evt-1"),
        "run.requested": p.RunRequested(
            run_id="run-1",
            trigger="manual",
            schedule_id="sch-1",
            mode="content-refresh",
            selection=selection,
            reason=p.RunReason(
                feedser_export_ids=["fx-1"],
                vexer_export_ids=["vx-1"],
                scheduled_for="2024-01-01T02:00:00Z",
                text="because",
            ),
            requested_by="alice",
        ),
        "run.planned": p.RunPlanned(
            run_id="run-1",
            trigger="feedser",
            schedule_ids=["sch-1", "sch-2"],
            stats=stats,
            segments=[p.SegmentRef(segment_id="seg-1", shard=0, images=9)],
            degraded=True,
            degraded_reason="index stale",
        ),
        "run.cancel_requested": p.RunCancelRequested(run_id="run-1", by="bob", reason="oops"),
        "run.cancelled": p.RunCancelled(run_id="run-1", reason="oops", stats=stats),
        "run.completed": p.RunCompleted(
            run_id="run-1",
            state="error",
            stats=stats,
            coverage=p.Coverage(evaluated=7, not_evaluated=2, reasons={"no_sbom": 2}),
            error="scanner down",
        ),
        "segment.enqueued": p.SegmentEnqueued(
            segment_id="seg-1",
            run_id="run-1",
            shard=3,
            digests=[DIGEST, DIGEST2],
            rate_per_second=10,
            mode="content-refresh",
            priority=9,
        ),
        "segment.started": p.SegmentStarted(
            segment_id="seg-1", run_id="run-1", runner="runner-a", attempt=2
        ),
        "segment.completed": p.SegmentCompleted(
            segment_id="seg-1",
            run_id="run-1",
            completed=8,
            failed=1,
            cancelled=0,
            usage=p.SegmentUsage(
                wall_ms=1234,
                scanner_p50_ms=1.5,
                scanner_p95_ms=9.25,
                scanner_p99_ms=20.0,
                retries=1,
            ),
        ),
        "segment.failed": p.SegmentFailed(
            segment_id="seg-1",
            run_id="run-1",
            reason="runner lost",
            deliveries=5,
            dead_lettered=True,
        ),
        "verdict.recorded": p.VerdictRecorded(
            run_id="run-1",
            segment_id="seg-1",
            digest=DIGEST,
            status="failed",
            error="timeout",
            new_criticals=1,
            new_high=2,
            kev_hits=["CVE-2024-1"],
            top_findings=[finding],
            findings=[finding],
            report_url="https://reports/1",
        ),
        "delta.acknowledged": p.DeltaAcknowledged(
            run_id="run-1",
            digest=DIGEST,
            by="alice",
            note="fix in the next base image",
            ticket="SEC-1234",
        ),
        "audit.snapshot": p.AuditSnapshot(
            from_chain_link=HEX64,
            to_chain_link="1e" * 32,
            from_position=0,
            to_position=9,
            entry_count=10,
            merkle_root="2d" * 32,
            snapshot_hlc="1700000000000:0:auditor",
            envelope=p.DsseEnvelope(
                payloadType="application/vnd.in-toto+json",
                payload="eyJ9",
                signatures=[p.DsseSignature(keyid="k1", sig="c2ln")],
            ),
        ),
    }


SAMPLES = sample_payloads()
HLC = Timestamp(1_700_000_000_000, 3, "node-1")


def make(kind: str, **kw: Any) -> Envelope:
    return new_event(kind, "acme", SAMPLES[kind], HLC, event_id=f"evt-{kind}", **kw)


def wire(kind: str = "schedule.paused", /, **overrides: Any) -> dict[str, Any]:
    """The JSON document of a valid event, to be broken by a test."""
    doc = json.loads(encode(make(kind)))
    doc.update(overrides)
    return doc


def reason_of(data: bytes | dict) -> str:
    if isinstance(data, dict):
        data = json.dumps(data).encode()
    with pytest.raises(EventError) as info:
        decode(data)
    assert info.value.detail
    assert str(info.value).startswith(info.value.reason + ": ")
    return info.value.reason


# ---------------------------------------------------------------- roundtrip


def test_samples_cover_every_kind():
    assert set(SAMPLES) == set(KINDS)
    for kind, payload in SAMPLES.items():
        assert isinstance(payload, KINDS[kind].payload), kind


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_roundtrip_every_kind(kind):
    event = make(kind, causation_id="cause-1", correlation_id="corr-1")
    data = encode(event)
    got = decode(data)
    assert isinstance(got, Envelope)
    assert type(got.payload) is KINDS[kind].payload
    assert msgspec.structs.asdict(got) == msgspec.structs.asdict(event)
    assert got.payload == event.payload
    assert got.schema == KINDS[kind].version
    assert got.timestamp == HLC
    # stable: re-encoding the decoded event yields the same bytes
    assert encode(got) == data


def test_wire_names_are_camel_case():
    doc = json.loads(encode(make("schedule.created", causation_id="c-1")))
    assert {"causationId", "correlationId"} <= doc.keys()
    assert {"scheduleId", "onlyIf", "createdBy"} <= doc["payload"].keys()
    assert doc["payload"]["onlyIf"]["lastReportOlderThanDays"] == 3
    feed = json.loads(encode(make("export.feedser")))["payload"]
    assert feed["window"]["from"] == "2024-01-01T00:00:00Z"
    assert "changedProductKeys" in feed
    comps = json.loads(encode(make("image.indexed")))["payload"]["components"]
    assert comps[0] == ["pkg:npm/a@1", "pkg:npm/a", True]  # array-like on the wire


def test_decoded_event_is_an_envelope_that_reencodes_identically():
    """decode() returns an Envelope subclass (the payload is set in place for speed), so
    compare by isinstance, fields and bytes rather than by Struct equality."""
    event = make("schedule.paused")
    decoded = decode(encode(event))
    assert isinstance(decoded, Envelope)
    assert encode(decoded) == encode(event)


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "data", [b"{not json", b"", b'{"id": "x"', b"\xff\xfe", b'{"id": "a",}', b'{"id" "a"}']
)
def test_malformed_json(data):
    assert reason_of(data) == "malformed_json"


@pytest.mark.parametrize("field", ["id", "kind", "tenant", "hlc", "schema", "payload"])
def test_missing_envelope_field(field):
    doc = wire()
    del doc[field]
    assert reason_of(doc) == "invalid_envelope"


@pytest.mark.parametrize(
    "data", [b"[]", b"42", b'"event"', b"null", json.dumps(wire(schema="1")).encode()]
)
def test_envelope_of_wrong_shape(data):
    assert reason_of(data) == "invalid_envelope"


@pytest.mark.parametrize(
    "tenant", ["", "Acme", "acme.prod", "acme prod", "a" * 129, "acme*", 7, None]
)
def test_bad_tenant(tenant):
    assert reason_of(wire(tenant=tenant)) == "invalid_envelope"


@pytest.mark.parametrize(
    "hlc",
    ["", "abc", "1:2", "1:2:", "-1:0:n", "1:0:bad node", "1:0:" + "x" * 33, "1.0:0:n", 17, None],
)
def test_bad_hlc(hlc):
    assert reason_of(wire(hlc=hlc)) == "invalid_envelope"


@pytest.mark.parametrize(
    "overrides",
    [
        {"id": ""},
        {"id": "has space"},
        {"id": "x" * 129},
        {"kind": ""},
        {"schema": 0},
        {"causationId": "bad/id"},
    ],
)
def test_bad_envelope_values(overrides):
    assert reason_of(wire(**overrides)) == "invalid_envelope"


@pytest.mark.parametrize("kind", ["schedule.exploded", "Schedule.Created", "x" * 64])
def test_unknown_kind(kind):
    assert reason_of(wire(kind=kind)) == "unknown_kind"


@pytest.mark.parametrize("kind", ["schedule.created", "schedule.paused", "verdict.recorded"])
def test_newer_schema_version(kind):
    doc = wire(kind, schema=KINDS[kind].version + 1)
    assert reason_of(doc) == "unsupported_schema_version"


def test_unknown_payload_field():
    doc = wire("schedule.paused")
    doc["payload"]["surprise"] = 1
    assert reason_of(doc) == "invalid_payload"
    nested = wire("schedule.created")
    nested["payload"]["limits"]["maxJob"] = 3  # typo of maxJobs
    assert reason_of(nested) == "invalid_payload"


def test_snake_case_payload_field_is_unknown():
    doc = wire("schedule.paused")
    doc["payload"]["schedule_id"] = doc["payload"].pop("scheduleId")
    assert reason_of(doc) == "invalid_payload"


@pytest.mark.parametrize(
    "payload",
    [
        "not an object",
        [],
        {},
        {"scheduleId": ""},
        {"scheduleId": 5},
        {"scheduleId": "s", "reason": "x" * 1001},
    ],
)
def test_invalid_payload_values(payload):
    assert reason_of(wire("schedule.paused", payload=payload)) == "invalid_payload"


@pytest.mark.parametrize("cron", ["61 * * * *", "* * *", "not a cron", "0 0 30 2 *", "@reboot"])
@pytest.mark.parametrize("kind", ["schedule.created", "schedule.updated"])
def test_invalid_cron(kind, cron):
    doc = wire(kind)
    doc["payload"]["whenCron"] = cron
    with pytest.raises(EventError) as info:
        decode(json.dumps(doc).encode())
    assert info.value.reason == "invalid_payload"
    assert "cron" in info.value.detail


@pytest.mark.parametrize("tz", ["Mars/Olympus_Mons", "Europe/", "/etc/localtime", "../UTC", "Utc"])
@pytest.mark.parametrize("kind", ["schedule.created", "schedule.updated"])
def test_unknown_time_zone(kind, tz):
    doc = wire(kind)
    doc["payload"]["timezone"] = tz
    with pytest.raises(EventError) as info:
        decode(json.dumps(doc).encode())
    assert info.value.reason == "invalid_payload"
    assert "time zone" in info.value.detail


def test_update_without_cron_or_timezone_is_valid():
    doc = wire("schedule.updated", payload={"scheduleId": "sch-1", "name": "n"})
    got = decode(json.dumps(doc).encode())
    assert got.payload.cron is msgspec.UNSET
    assert got.payload.timezone is msgspec.UNSET
    assert got.payload.name == "n"


@pytest.mark.parametrize(
    "status", ["affected", "affected→bogus", "fixed->", "Affected->fixed", "affected=>fixed", ""]
)
def test_invalid_vex_transition(status):
    doc = wire("export.vexer")
    doc["payload"]["changedClaims"][0]["status"] = status
    with pytest.raises(EventError) as info:
        decode(json.dumps(doc).encode())
    assert info.value.reason == "invalid_payload"


def test_changed_product_keys_limit():
    doc = wire("export.feedser")
    doc["payload"]["changedProductKeys"] = [f"k{i}" for i in range(p.MAX_KEYS)]
    got = decode(json.dumps(doc).encode())  # exactly at the limit: accepted
    assert len(got.payload.changed_product_keys) == p.MAX_KEYS
    doc["payload"]["changedProductKeys"].append("one-too-many")
    assert reason_of(doc) == "invalid_payload"


def test_digest_pattern_enforced():
    doc = wire("image.removed")
    doc["payload"]["digest"] = "sha256:XYZ"
    assert reason_of(doc) == "invalid_payload"


def test_tenant_with_trailing_newline_is_refused():
    assert reason_of(wire(tenant="acme\n")) == "invalid_envelope"


@pytest.mark.parametrize("hlc", ["99999999999999999999:0:n", "1:9999999999:n"])
def test_out_of_range_hlc_is_refused(hlc):
    assert reason_of(wire(hlc=hlc)) == "invalid_envelope"


# ---------------------------------------------------------------- upcasting


def v1_schedule(kind: str, payload: dict[str, Any]) -> bytes:
    return json.dumps(wire(kind, schema=1, payload=payload)).encode()


def test_upcast_v1_schedule_created():
    got = decode(
        v1_schedule(
            "schedule.created",
            {
                "scheduleId": "sch-9",
                "name": "Legacy",
                "whenCron": "15 3 * * 1",
                "timezone": "America/New_York",
                "mode": "content-refresh",
            },
        )
    )
    assert got.schema == 3
    assert isinstance(got.payload, p.ScheduleCreated)
    assert got.payload.cron == "15 3 * * 1"
    assert got.payload.timezone == "America/New_York"
    assert got.payload.mode == "content-refresh"
    assert got.payload.schedule_id == "sch-9"
    # the upcast event re-encodes as the current version, with the specification's names
    doc = json.loads(encode(got))
    assert doc["schema"] == 3
    assert doc["payload"]["whenCron"] == "15 3 * * 1"
    assert doc["payload"]["notify"]["includeKEV"] is True
    assert "cron" not in doc["payload"]


def test_upcast_v1_schedule_updated():
    got = decode(v1_schedule("schedule.updated", {"scheduleId": "sch-9", "whenCron": "0 1 * * *"}))
    assert got.schema == 3
    assert got.payload.cron == "0 1 * * *"
    assert got.payload.timezone is msgspec.UNSET


def v2_schedule(kind: str, payload: dict[str, Any]) -> bytes:
    return json.dumps(wire(kind, schema=2, payload=payload)).encode()


@pytest.mark.parametrize("kind", ["schedule.created", "schedule.updated"])
def test_upcast_v2_schedule_takes_the_specifications_names(kind):
    old = {
        "scheduleId": "sch-2",
        "name": "Schema two",
        "cron": "0 4 * * *",
        "timezone": "UTC",
        "notify": {"onNewFindings": False, "minSeverity": "critical", "includeKev": False},
    }
    got = decode(v2_schedule(kind, old))
    assert got.schema == 3
    assert got.payload.cron == "0 4 * * *"
    assert got.payload.notify == p.NotifyRule(
        on_new_findings=False, min_severity="critical", include_kev=False
    )
    doc = json.loads(encode(got))["payload"]
    assert (doc["whenCron"], doc["notify"]["includeKEV"]) == ("0 4 * * *", False)
    assert "cron" not in doc and "includeKev" not in doc["notify"]


@pytest.mark.parametrize("kind", ["schedule.created", "schedule.updated"])
def test_a_v3_name_in_a_v2_event_is_refused(kind):
    """Upcasting renames only what version 2 said: a v2 event naming a v3 field is not v2."""
    bad = {"scheduleId": "s", "name": "n", "cron": "0 * * * *", "timezone": "UTC",
           "notify": {"includeKEV": True}}  # fmt: skip
    with pytest.raises(EventError) as info:
        decode(v2_schedule(kind, bad))
    assert info.value.reason == "invalid_payload"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"scheduleId": "s", "name": "n", "whenCron": "99 * * * *", "timezone": "UTC"}, "cron"),
        ({"scheduleId": "s", "name": "n", "whenCron": "0 * * * *", "timezone": "Nowhere/X"}, ""),
        ({"scheduleId": "s", "name": "n", "timezone": "UTC"}, "whenCron"),  # no cron at all
        ({"scheduleId": "s", "name": "n", "whenCron": "0 * * * *", "timezone": "UTC", "x": 1}, ""),
        ("a string", ""),
    ],
)
def test_upcast_still_validates(payload, reason):
    with pytest.raises(EventError) as info:
        decode(v1_schedule("schedule.created", payload))
    assert info.value.reason == "invalid_payload"
    assert reason in info.value.detail


@pytest.mark.parametrize(
    ("path", "old", "new"), [((), "whenCron", "cron"), (("notify",), "includeKEV", "includeKev")]
)
def test_current_version_does_not_accept_the_schema_2_names(path, old, new):
    doc = wire("schedule.created")
    node = doc["payload"]
    for name in path:
        node = node.setdefault(name, {})
    node[new] = node.pop(old, True)
    assert reason_of(doc) == "invalid_payload"


# ---------------------------------------------------------------- new_event


def test_new_event_fills_envelope():
    payload = SAMPLES["schedule.created"]
    e = new_event("schedule.created", "acme", payload, HLC)
    assert e.kind == "schedule.created"
    assert e.schema == KINDS["schedule.created"].version == 3
    assert e.hlc == "1700000000000:3:node-1"
    assert e.correlation_id == e.id  # a new event starts its own correlation
    assert e.causation_id is None
    assert len(e.id) == 36 and e.id[14] == "7"  # a UUIDv7
    assert new_event("schedule.created", "acme", payload, HLC).id != e.id
    f = new_event(
        "schedule.created",
        "acme",
        payload,
        "5:0:n",
        event_id="fixed",
        causation_id="c",
        correlation_id="k",
    )
    assert (f.id, f.hlc, f.causation_id, f.correlation_id) == ("fixed", "5:0:n", "c", "k")


def test_new_event_refuses_wrong_payload_type():
    with pytest.raises(EventError) as info:
        new_event("schedule.created", "acme", SAMPLES["schedule.paused"], HLC)
    assert info.value.reason == "invalid_payload"
    assert "ScheduleCreated" in info.value.detail
    assert "ScheduleStateChange" in info.value.detail


def test_new_event_refuses_unknown_kind():
    with pytest.raises(EventError) as info:
        new_event("schedule.exploded", "acme", SAMPLES["schedule.paused"], HLC)
    assert info.value.reason == "unknown_kind"


@pytest.mark.parametrize("tenant", ["", "Acme", "a.b", None])
def test_new_event_refuses_bad_tenant(tenant):
    with pytest.raises(InvalidTenant):
        new_event("schedule.paused", tenant, SAMPLES["schedule.paused"], HLC)


def test_envelope_is_immutable():
    e = make("schedule.paused")
    with pytest.raises(AttributeError):
        e.tenant = "other"  # type: ignore[misc]
