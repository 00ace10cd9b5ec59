"""deploy/nats/producer-scanner.conf on a real nats-server: the scanner's NATS user can
publish image events for its own tenant (and streamproc folds them), and is refused for any
other tenant or subject, and for other clients' inboxes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.errors import TimeoutError as NatsTimeout

from streamproc.bus import objects
from streamproc.bus.connect import NatsAuth, connect
from streamproc.events import payloads as p
from streamproc.events.catalog import subject_for
from streamproc.events.envelope import encode, new_event
from streamproc.ids import derive_id
from streamproc.impact.projection import ImpactProjection
from streamproc.impact.selector import Selector
from streamproc.natsd.server import find_binary, free_port
from streamproc.readmodel.images import Images
from streamproc.readmodel.queries import ReadModel
from streamproc.runtime.projector import Projector
from streamproc.sbom.publish import payload_digest
from streamproc.state.store import RocksStore
from tests.helpers import eventually

CONF = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "producer-scanner.conf"
PASSWORDS = {
    "STREAMPROC_NATS_PASSWORD": "streamproc-secret",
    "SCANNER_ACME_PASSWORD": "acme-secret",
}
INBOX = "_INBOX_scanner_acme"
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """nats-server with the example config as written; only ports and working directory
    (its store is ./data/nats) are the test's own."""
    port = free_port()
    proc = subprocess.Popen(
        [
            find_binary(),
            "-c",
            str(CONF),
            "-a",
            "127.0.0.1",
            "-p",
            str(port),
            "-m",
            str(free_port()),
        ],
        cwd=tmp_path,
        env={**os.environ, **PASSWORDS},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if b"Server is ready" in line:
                break
        else:
            pytest.fail(f"nats-server did not start (exit {proc.wait()})")
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


SBOM = b'{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}'


def indexed_event(tenant: str) -> tuple[str, bytes, str]:
    payload = p.ImageIndexed(
        sbom=objects.key_of(SBOM),
        digest=DIGEST,
        registry="registry.local",
        repository="acme/app",
        tags=["1.0"],
        components=[
            p.Component(purl="pkg:pypi/pyyaml@5.3.1", product_key="pkg:pypi/pyyaml"),
            p.Component(purl="pkg:pypi/requests@2.28.0", product_key="pkg:pypi/requests"),
        ],
    )
    eid = derive_id("image.indexed", tenant, DIGEST, payload_digest(payload))
    event = new_event("image.indexed", tenant, payload, "1700000000000:0:scanner", event_id=eid)
    return subject_for("scheduler", tenant, "image.indexed", payload), encode(event), eid


async def test_scanner_publishes_only_its_tenants_image_events(server: str, tmp_path: Path) -> None:
    env = {**os.environ, **PASSWORDS, "STREAMPROC_NATS_USER": "streamproc"}
    applied = subprocess.run(
        [sys.executable, "-m", "streamproc.cli", "streams", "apply", "--nats-url", server],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert applied.returncode == 0, applied.stderr

    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    scanner = await nats.connect(
        server,
        user="scanner-acme",
        password=PASSWORDS["SCANNER_ACME_PASSWORD"],
        inbox_prefix=INBOX,
        error_cb=on_error,
        max_reconnect_attempts=0,
    )
    try:
        js = scanner.jetstream()
        # The SBOM first, into the shared SBOM store, with nats-py's object store.
        obs = await js.object_store("scheduler_sboms")
        await obs.put(objects.key_of(SBOM), SBOM)
        await obs.put(objects.key_of(SBOM), SBOM)  # again: overwriting is allowed too
        subject, data, eid = indexed_event("acme")
        assert subject == f"scheduler.events.acme.image.{DIGEST}"
        ack = await js.publish(subject, data, headers={"Nats-Msg-Id": eid}, timeout=5)
        assert (ack.stream, ack.seq, bool(ack.duplicate)) == ("SCHEDULER", 1, False)
        again = await js.publish(subject, data, headers={"Nats-Msg-Id": eid}, timeout=5)
        assert (again.seq, again.duplicate) == (1, True)
        # Its own subject with an event that claims another tenant: NATS stores it (the
        # subject is allowed), streamproc quarantines it (below).
        _, forged, forged_id = indexed_event("globex")
        stored = await js.publish(subject, forged, headers={"Nats-Msg-Id": forged_id}, timeout=5)
        assert stored.seq == 2

        other_tenant, other_data, other_id = indexed_event("globex")
        refused = [
            (other_tenant, other_data),  # another tenant's image
            ("scheduler.events.acme.schedule.s1", data),  # another aggregate of its tenant
            ("scheduler.work.acme.segment.3", data),  # the work queue
        ]
        for bad_subject, body in refused:
            with pytest.raises(NatsTimeout):
                await js.publish(bad_subject, body, headers={"Nats-Msg-Id": other_id}, timeout=0.5)
        await eventually(lambda: len(errors) >= len(refused), what="permission errors")
        assert all("permissions violation for publish" in e.lower() for e in errors), errors
        errors.clear()
        await scanner.subscribe("_INBOX.>")  # other clients' replies
        await scanner.flush()
        await eventually(lambda: errors, what="subscription refused")
        assert "permissions violation for subscription" in errors[0].lower(), errors
    finally:
        await scanner.close()

    # Without its own inbox prefix the scanner never hears the acknowledgement.
    plain = await nats.connect(
        server,
        user="scanner-acme",
        password=PASSWORDS["SCANNER_ACME_PASSWORD"],
        error_cb=on_error,
        max_reconnect_attempts=0,
    )
    try:
        with pytest.raises(NatsTimeout):
            await plain.jetstream().publish(
                subject, data, headers={"Nats-Msg-Id": eid}, timeout=0.5
            )
    finally:
        await plain.close()

    # streamproc (its own user) folds what the scanner published: one image, for acme.
    nc = await connect(
        server, auth=NatsAuth(user="streamproc", password=PASSWORDS["STREAMPROC_NATS_PASSWORD"])
    )
    store = RocksStore(tmp_path / "state")
    impact = ImpactProjection(warm_on_start=False)
    try:
        proj = await Projector(
            nc,
            store,
            [Images(), impact],
            stream="SCHEDULER",
            role="gateway",
            subjects="scheduler.events.",
        ).start()
        await asyncio.wait_for(proj.run(until_seq=2), 30)
        rm = ReadModel(store)
        seen = rm.image("acme", DIGEST)
        assert seen is not None and (seen.purls, seen.event_id) == (2, eid)
        assert seen.sbom is not None
        assert await objects.get(nc, "scheduler_sboms", seen.sbom) == SBOM
        assert rm.image("globex", DIGEST) is None
        assert proj.folder.quarantined == 1
        hit = impact.index.resolve_by_purls(["pkg:pypi/pyyaml"], False, Selector(tenant="acme"))
        assert hit.digests() == [DIGEST]
    finally:
        store.close()
        await nc.close()
