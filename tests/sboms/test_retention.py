"""SBOM retention on a real nats-server and RocksDB: the planner's reference fold, folded by
the projector from the log, and the retention reactor driven pass by pass with a wall clock
of the test's choosing (what the fold and the SBOM store say is real)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamproc.bus import objects
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, new_event
from streamproc.hlc import HybridLogicalClock
from streamproc.names import sbom_bucket
from streamproc.runtime.projector import Projector
from streamproc.runtime.reactor import RoleContext
from streamproc.sbom.publish import store_sbom
from streamproc.sboms.refs import SbomRefs, released_before
from streamproc.sboms.retention import SbomRetention, load_retention
from streamproc.state.store import RocksStore
from tests.planner.harness import events_of
from tests.samples import digest

R = 3600.0
"""The retention of these tests: long, so only the test's clock decides."""
R_MS = int(R * 1000)


@dataclass
class Planner:
    """The reference fold as the planner hosts it, and a retention reactor on its state."""

    nc: FastClient
    pub: Publisher
    prefix: str
    proj: Projector
    ctx: RoleContext
    task: asyncio.Task[None]
    events: str
    now: int = 0

    def reactor(self, sweep_s: float = 3600.0) -> SbomRetention:
        return SbomRetention(self.ctx.settings, R, wall=lambda: self.now, sweep_s=sweep_s)

    @property
    def bucket(self) -> str:
        return sbom_bucket(self.prefix)

    async def publish(self, kind: str, tenant: str, payload: p.Payload) -> Envelope:
        e = new_event(kind, tenant, payload, str(self.ctx.clock.now()))
        ack = await self.pub.publish_event(e)
        await self.proj.wait_for(ack.seq, 10)
        return e

    async def index(self, tenant: str, n: int, sbom: bytes | None) -> Envelope:
        name = await store_sbom(self.nc, self.prefix, sbom) if sbom is not None else None
        img = p.ImageIndexed(digest=digest(n), registry="r", repository="a", sbom=name)
        return await self.publish("image.indexed", tenant, img)

    async def remove(self, tenant: str, n: int) -> Envelope:
        return await self.publish("image.removed", tenant, p.ImageRemoved(digest=digest(n)))

    async def stored(self, sbom: bytes) -> bool:
        try:
            return await objects.get(self.nc, self.bucket, objects.key_of(sbom)) == sbom
        except objects.Missing:
            return False
        except objects.ObjectError:
            return False  # its chunks were purged while we read them: a deletion under way

    async def stored_at(self, sbom: bytes) -> int:
        meta = await objects.meta(self.nc, self.bucket, objects.key_of(sbom))
        assert meta is not None and not meta.deleted
        return int(meta.time.timestamp() * 1000)

    async def deletions(self) -> list[Envelope]:
        return await events_of(self.nc, self.events, "sbom.deleted")

    async def settle(self) -> None:
        """Until the fold has applied everything on the log (its own deletions too)."""
        info = await self.nc.jetstream().stream_info(self.events)
        await self.proj.wait_for(info.state.last_seq, 10)


@pytest.fixture
async def planner(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> AsyncIterator[Planner]:
    store = RocksStore(tmp_path / "state")
    proj = await Projector(nc, store, [SbomRefs()], stream=stream_names[0], role="planner").start()
    ctx = RoleContext(
        role="planner",
        settings=Settings(prefix=prefix, data_dir=tmp_path, node_id="planner-t"),
        store=store,
        publisher=publisher,
        clock=HybridLogicalClock("planner-t"),
        applied=lambda: proj.applied,
        wait_for=proj.wait_for,
        lag=proj.lag,
    )
    task = asyncio.create_task(proj.run())
    yield Planner(nc, publisher, prefix, proj, ctx, task, stream_names[0])
    proj.stop()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    store.close()


def sbom() -> bytes:
    return (
        b'{"bomFormat":"CycloneDX","specVersion":"1.6","serialNumber":"%s"}'
        % os.urandom(8).hex().encode()
    )


async def test_the_last_image_going_deletes_the_sbom_after_the_retention(planner: Planner) -> None:
    x = sbom()
    await planner.index("acme", 1, x)
    await planner.index("beta", 2, x)  # another tenant sent the same document
    await planner.remove("acme", 1)
    retention = planner.reactor()
    planner.now = await planner.stored_at(x) + 10 * R_MS
    await retention.react(planner.ctx)
    assert await planner.stored(x), "an image of tenant beta still uses it"
    last = await planner.remove("beta", 2)
    released_at = int(last.hlc.split(":")[0])
    planner.now = released_at + R_MS - 1
    retention = planner.reactor()
    await retention.react(planner.ctx)
    assert await planner.stored(x) and await planner.deletions() == []
    planner.now = released_at + R_MS
    await planner.reactor().react(planner.ctx)
    assert not await planner.stored(x)
    (deleted,) = await planner.deletions()
    assert deleted.tenant == "beta"
    assert deleted.payload == p.SbomDeleted(sbom=objects.key_of(x), released_by=last.id)
    await planner.settle()
    assert list(released_before(planner.ctx.store, 2**62)) == []
    planner.now += 60_000
    await planner.reactor().react(planner.ctx)  # a later pass, a later term: nothing more
    assert len(await planner.deletions()) == 1


async def test_an_sbom_stored_again_before_the_deletion_is_kept(planner: Planner) -> None:
    x, y = sbom(), sbom()
    await planner.index("acme", 1, x)
    released = await planner.remove("acme", 1)
    # A gateway stores the same document again; the planner has not folded its event yet.
    await store_sbom(planner.nc, planner.prefix, x)
    again = await planner.stored_at(x)
    assert again > int(released.hlc.split(":")[0])
    planner.now = again + R_MS - 1  # the release is due, the new store is not
    retention = planner.reactor()
    await retention.react(planner.ctx)
    assert await planner.stored(x)
    # Its image.indexed arrives: the release is taken back, and nothing deletes it later.
    await planner.index("acme", 1, x)
    planner.now = again + 100 * R_MS
    await planner.reactor().react(planner.ctx)
    assert await planner.stored(x) and await planner.deletions() == []
    # The same for a re-index with the same SBOM while it is released: the other one, y,
    # released by the change, goes after its retention.
    await planner.index("acme", 3, y)
    change = await planner.index("acme", 3, x)
    planner.now = int(change.hlc.split(":")[0]) + 100 * R_MS
    await planner.reactor().react(planner.ctx)
    assert await planner.stored(x) and not await planner.stored(y)


async def test_a_store_that_races_the_deletion_wins(planner: Planner) -> None:
    """The deletion is conditional on the description it read: a store in between keeps
    the object (the reactor reads it anew on its next pass)."""
    x = sbom()
    await planner.index("acme", 1, x)
    await planner.remove("acme", 1)
    name = objects.key_of(x)
    read = await objects.meta(planner.nc, planner.bucket, name)
    assert read is not None
    await store_sbom(planner.nc, planner.prefix, x)
    assert not await objects.delete_if_unchanged(planner.nc, planner.bucket, read)
    assert await planner.stored(x)


async def test_a_deletion_redone_after_a_crash_publishes_one_event(planner: Planner) -> None:
    """Killed between deleting the object and publishing ``sbom.deleted``: the next term
    finds the object gone and publishes the same event id, which the stream keeps once."""
    x = sbom()
    await planner.index("acme", 1, x)
    last = await planner.remove("acme", 1)
    meta = await objects.meta(planner.nc, planner.bucket, objects.key_of(x))
    assert meta is not None
    assert await objects.delete_if_unchanged(planner.nc, planner.bucket, meta)  # then "crash"
    planner.now = int(last.hlc.split(":")[0]) + R_MS
    await planner.reactor().react(planner.ctx)
    await planner.reactor().react(planner.ctx)  # a second instance before the fold caught up
    (deleted,) = await planner.deletions()
    assert deleted.payload.released_by == last.id  # type: ignore[attr-defined]
    await planner.settle()
    assert list(released_before(planner.ctx.store, 2**62)) == []


async def test_an_sbom_no_event_ever_named_is_swept_after_the_retention(planner: Planner) -> None:
    orphan, used = sbom(), sbom()
    await store_sbom(planner.nc, planner.prefix, orphan)  # its image was never published
    await planner.index("acme", 1, used)
    await planner.settle()
    planner.now = await planner.stored_at(orphan) + R_MS - 1
    await planner.reactor(sweep_s=0).react(planner.ctx)
    assert await planner.stored(orphan)
    planner.now = await planner.stored_at(used) + R_MS
    await planner.reactor(sweep_s=0).react(planner.ctx)
    assert not await planner.stored(orphan) and await planner.stored(used)
    assert await planner.deletions() == []  # no image ever used it: no event to end


async def test_an_unreachable_store_is_a_named_problem_of_the_role(planner: Planner) -> None:
    x = sbom()
    await planner.index("acme", 1, x)
    last = await planner.remove("acme", 1)
    await planner.nc.jetstream().delete_stream(objects.stream_of(planner.bucket))
    planner.now = int(last.hlc.split(":")[0]) + R_MS
    await planner.reactor().react(planner.ctx)
    problem = planner.ctx.problems.get("sbom_retention", "")
    assert planner.bucket in problem and "streams apply" in problem
    assert await planner.deletions() == []


def test_the_retention_setting() -> None:
    assert load_retention({}) == 86400.0
    assert load_retention({"STREAMPROC_SBOMS_RETENTION_S": "600"}) == 600.0
    for bad in ("0.5", "-1", "soon", "nan"):
        with pytest.raises(ValueError, match="STREAMPROC_SBOMS_RETENTION_S"):
            load_retention({"STREAMPROC_SBOMS_RETENTION_S": bad})
