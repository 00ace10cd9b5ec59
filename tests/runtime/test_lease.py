"""The KV lease against a real nats-server: one holder, renewal, expiry, takeover, loss."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

import pytest
from nats.js.kv import KeyValue

from streamproc.bus import jsapi
from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.config import ConfigError
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.runtime.lease import Lease, LeaseError, bucket_name, lease_ttl, open_bucket

TTL = 1.0


async def _bucket(nc: FastClient, prefix: str, ttl: float = TTL) -> KeyValue:
    kv, actual = await open_bucket(nc, prefix, ttl)
    assert actual == ttl
    return kv


async def _drop(nc: FastClient, prefix: str) -> None:
    await jsapi.request(nc, f"STREAM.DELETE.KV_{bucket_name(prefix)}")


async def test_one_holder_renews_and_a_release_hands_over_at_once(
    nc: FastClient, prefix: str
) -> None:
    kv = await _bucket(nc, prefix)
    try:
        a = Lease(kv, "planner", "node-a/1/aa", TTL)
        b = Lease(kv, "planner", "node-b/2/bb", TTL)
        assert await a.acquire() and a.held()
        assert not await b.acquire() and not b.held()
        assert await b.current_holder() == "node-a/1/aa"
        first = a.revision
        assert await a.renew() and a.revision is not None and first is not None
        assert a.revision > first
        assert await a.acquire(), "acquiring a lease already held renews it"
        other = Lease(kv, "auditor", "node-b/2/bb", TTL)
        assert await other.acquire(), "keys are independent"
        await a.release()
        assert not a.held()
        assert await b.acquire(), "a released lease is free without waiting for the TTL"
        assert await b.current_holder() == "node-b/2/bb"
        assert not await a.renew(), "the old holder cannot renew"
    finally:
        await _drop(nc, prefix)


async def test_an_unrenewed_lease_expires_and_is_taken_over(nc: FastClient, prefix: str) -> None:
    kv = await _bucket(nc, prefix)
    try:
        a = Lease(kv, "planner", "node-a/1/aa", TTL)
        b = Lease(kv, "planner", "node-b/2/bb", TTL)
        assert await a.acquire()
        renewed = time.monotonic()
        assert await a.renew()
        while not await b.acquire():
            await asyncio.sleep(0.05)
        took = time.monotonic() - renewed
        assert TTL <= took < TTL + 1.5, took
        assert not a.held(), "the old holder stopped believing before the takeover"
        assert not await a.renew() and a.revision is None, "revision moved: lost"
        assert not await a.acquire()
    finally:
        await _drop(nc, prefix)


async def test_a_write_that_timed_out_but_was_stored_stays_ours(
    nc: FastClient, prefix: str
) -> None:
    kv = await _bucket(nc, prefix)
    try:
        a = Lease(kv, "planner", "node-a/1/aa", TTL)
        assert await a.acquire() and a.revision is not None
        stored = await kv.update("planner", b"node-a/1/aa", last=a.revision)  # "timed out"
        assert await a.renew() and a.held() and a.revision is not None
        assert a.revision > stored
        await kv.update("planner", b"node-c/3/cc", last=a.revision)  # someone else's now
        assert not await a.renew() and not a.held()
    finally:
        await _drop(nc, prefix)


async def test_a_release_after_a_renewal_it_never_saw_still_frees_the_lease(
    nc: FastClient, prefix: str
) -> None:
    """A stop that cancels a renewal after the server stored it (a planner's partitions, a
    clean stop mid-step) must still hand the lease on at once, not leave it for the TTL."""
    kv = await _bucket(nc, prefix, ttl=30.0)
    try:
        a = Lease(kv, "planner", "node-a/1/aa", 30.0)
        assert await a.acquire() and a.revision is not None
        await kv.update("planner", b"node-a/1/aa", last=a.revision)  # stored, answer unseen
        await a.release()
        assert await a.current_holder() is None
        b = Lease(kv, "planner", "node-b/2/bb", 30.0)
        assert await b.acquire(), "free at once, not after the 30 s TTL"
        await b.release()
        c = Lease(kv, "planner", "node-c/3/cc", 30.0)
        assert await c.acquire() and c.revision is not None
        await kv.update("planner", b"node-d/4/dd", last=c.revision)  # taken over meanwhile
        await c.release()
        assert await c.current_holder() == "node-d/4/dd", "another holder's lease stays theirs"
    finally:
        await _drop(nc, prefix)


async def test_nats_unreachable_past_the_ttl_drops_the_lease(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    client = await connect(server.url)
    try:
        kv = await _bucket(client, "lost")
        a = Lease(kv, "planner", "node-a/1/aa", TTL)
        assert await a.acquire()
        server.stop()
        assert await a.renew(), "within the TTL a failed renewal keeps the lease"
        while a.held():
            await asyncio.sleep(0.05)
        assert time.monotonic() >= a.valid_until
        assert not await a.renew() and a.revision is None
    finally:
        with contextlib.suppress(OSError):  # the connection is gone with the server
            await client.close()
        server.stop()


async def test_an_existing_bucket_keeps_its_ttl(
    nc: FastClient, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    await _bucket(nc, prefix, 2.0)
    try:
        with caplog.at_level(logging.WARNING, logger="streamproc.runtime.lease"):
            _, ttl = await open_bucket(nc, prefix, 1.0)
        assert ttl == 2.0
        assert "has a TTL of 2 s" in caplog.text
    finally:
        await _drop(nc, prefix)


async def test_a_bucket_without_ttl_is_refused(nc: FastClient, prefix: str) -> None:
    js = nc.jetstream()
    await js.create_key_value(bucket=bucket_name(prefix), history=1)
    try:
        with pytest.raises(LeaseError, match="no TTL"):
            await open_bucket(nc, prefix, 1.0)
    finally:
        await _drop(nc, prefix)


def test_ttl_setting() -> None:
    assert lease_ttl({}) == 5.0
    assert lease_ttl({"STREAMPROC_LEASE_TTL_S": "1.5"}) == 1.5
    with pytest.raises(ConfigError, match="not a number"):
        lease_ttl({"STREAMPROC_LEASE_TTL_S": "soon"})
    with pytest.raises(ConfigError, match="between"):
        lease_ttl({"STREAMPROC_LEASE_TTL_S": "0.1"})
