"""The outbox on a real nats-server: an image's verdict goes to the log only once its Notify
message is stored, and a segment's tally settles only when all of its images did."""

from __future__ import annotations

import pytest

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import NoStream, Publisher
from streamproc.events import payloads as p
from streamproc.events.envelope import encode
from streamproc.hlc import Timestamp
from streamproc.notify import messages as nm
from streamproc.runner.outbox import Outbox, Record, Tally
from streamproc.runner.scanner_client import ScanReport
from streamproc.runner.verdict import ImageJob, decide
from tests.runner.harness import events, notify_messages

STAMP = Timestamp(1_790_000_000_000, 0, "n1")


def record(publisher: Publisher, digest: str, notify_subject: str | None = None) -> Record:
    job = ImageJob("acme", "run-1", "seg-1", digest, "cause", (), p.NotifyRule())
    d = decide(job, ScanReport(image_digest=digest), None, STAMP)
    assert d.message is not None
    kind = nm.kind_of(d.message)
    subject = notify_subject or nm.subject(publisher.prefix, "acme", kind)
    v = d.verdict
    verdict = (publisher.subject_of(v), encode(v), v.id)
    notify = (subject, nm.encode(d.message), d.message.id)
    return Record("acme", "run-1", digest, verdict, notify, kind, d.findings, d.worse)


async def test_a_verdict_follows_its_stored_message_and_never_goes_alone(
    nc: FastClient, publisher: Publisher, prefix: str, stream_names: tuple[str, str, str]
) -> None:
    stored: list[str] = []
    outbox = Outbox(publisher, lambda r: stored.append(r.digest))
    good, lost = Tally(), Tally()
    for i in range(3):
        outbox.put(record(publisher, f"sha256:{i:064x}"), good)
    # A Notify message no stream takes (its subject is outside every stream): refused.
    outbox.put(record(publisher, f"sha256:{9:064x}", f"{prefix}.nowhere.acme"), lost)
    await good.settled()
    with pytest.raises(NoStream):
        await lost.settled()
    assert sorted(stored) == [f"sha256:{i:064x}" for i in range(3)]
    verdicts = await events(nc, stream_names[0], "verdict.recorded")
    assert sorted(v.payload.digest for v in verdicts) == stored, "no verdict without its message"
    assert len(await notify_messages(nc, stream_names[2])) == 3
    await outbox.close()
