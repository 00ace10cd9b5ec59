"""Which buckets a segment's calls take, from what the planner recorded; and segments of
schema 1 (recorded before the buckets were shared) still decode, keep their audit digest and
are paced by their run's bucket at the rate they recorded."""

from __future__ import annotations

import json

from streamproc.audit.entry import make_entry
from streamproc.events import payloads as p
from streamproc.events.envelope import decode, encode, new_event
from streamproc.runner.limiter import BucketSpec
from streamproc.runner.pacing import registry_buckets, report_buckets

HLC = "1767225600000:0:node-a"
DIGEST = "sha256:" + "ab" * 32


def test_a_planned_segment_names_its_runs_tenants_and_hosts_buckets() -> None:
    seg = p.SegmentEnqueued(
        segment_id="s", run_id="r:1", shard=0, digests=[DIGEST], rate_per_second=20,
        mode="content-refresh", tenant_rate=200, registry_host="reg.example:5000",
        registry_rate=8, burst_s=2.0,
    )  # fmt: skip
    assert report_buckets("acme", seg) == [
        BucketSpec("run.acme.r=3A1", 20, 2.0, "run_rate"),
        BucketSpec("tenant.acme", 200, 2.0, "tenant_bucket"),
    ]
    assert registry_buckets(seg) == [
        BucketSpec("host.reg=2Eexample=3A5000", 8, 2.0, "registry_bucket")
    ]
    analysis = p.SegmentEnqueued(
        segment_id="s", run_id="r", shard=0, digests=[DIGEST], rate_per_second=20, tenant_rate=9
    )
    assert registry_buckets(analysis) == []  # no registry call to pace


def test_a_schema_1_segment_decodes_keeps_its_digest_and_is_paced_by_its_run() -> None:
    current = new_event(
        "segment.enqueued",
        "acme",
        p.SegmentEnqueued(segment_id="s", run_id="r", shard=0, digests=[DIGEST], rate_per_second=5),
        HLC,
        event_id="e1",
    )
    doc = json.loads(encode(current))
    doc["schema"] = 1
    old = decode(json.dumps(doc).encode())
    assert old.schema == 2 and isinstance(old.payload, p.SegmentEnqueued)
    # Encoded again, the payload is byte for byte what schema 1 wrote: the audit chain of
    # an old log rebuilds to the same links.
    assert json.loads(encode(old))["payload"] == doc["payload"]
    assert "tenantRate" not in doc["payload"]
    assert make_entry(old, 0, None).payload_digest == make_entry(current, 0, None).payload_digest
    # Its recorded rate (the shard's share then) is taken as its run's: slower, never faster.
    assert report_buckets("acme", old.payload) == [BucketSpec("run.acme.r", 5, 1.0, "run_rate")]
