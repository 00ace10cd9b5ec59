"""The SBOM store on a real nats-server: content-addressed puts, reads, nats-py interop,
conditional deletion."""

from __future__ import annotations

import os

import pytest

from streamproc.bus import objects, streams
from streamproc.bus.fastclient import FastClient
from streamproc.names import sbom_bucket


@pytest.fixture
async def bucket(nc: FastClient, prefix: str) -> str:
    await streams.apply(nc, streams.definitions(prefix)[3:])
    return sbom_bucket(prefix)


async def test_put_get_round_trip_keeps_the_exact_bytes(nc: FastClient, bucket: str) -> None:
    for size in (0, 1, objects.CHUNK - 1, objects.CHUNK, 3 * objects.CHUNK + 17):
        data = os.urandom(size)
        name = await objects.put(nc, bucket, data)
        assert name == objects.key_of(data)
        assert await objects.get(nc, bucket, name) == data


async def test_a_repeated_put_rewrites_no_chunk(nc: FastClient, bucket: str) -> None:
    data = os.urandom(2 * objects.CHUNK + 5)
    name = await objects.put(nc, bucket, data)
    first = await objects.meta(nc, bucket, name)
    assert first is not None
    await objects.put(nc, bucket, data)
    again = await objects.meta(nc, bucket, name)
    assert again is not None
    assert again.nuid == first.nuid and again.seq > first.seq
    info = await nc.jetstream().stream_info(objects.stream_of(bucket))
    assert info.state.messages == 3 + 1  # three chunks, one description (rolled up)


async def test_nats_py_object_store_reads_and_writes_the_same_objects(
    nc: FastClient, bucket: str
) -> None:
    """A direct producer stores with nats-py (or `nats object put`); we read it, and the
    other way round."""
    obs = await nc.jetstream().object_store(bucket)
    data = os.urandom(300_000)
    await obs.put(objects.key_of(data), data)
    assert await objects.get(nc, bucket, objects.key_of(data)) == data
    ours = os.urandom(200_000)
    name = await objects.put(nc, bucket, ours)
    assert (await obs.get(name)).data == ours


async def test_a_misnamed_object_is_refused(nc: FastClient, bucket: str) -> None:
    obs = await nc.jetstream().object_store(bucket)
    await obs.put("sha256:" + "0" * 64, b"not what the name says")
    with pytest.raises(objects.ObjectError, match="do not match"):
        await objects.get(nc, bucket, "sha256:" + "0" * 64)


async def test_delete_only_if_nobody_stored_it_since(nc: FastClient, bucket: str) -> None:
    data = os.urandom(1000)
    name = await objects.put(nc, bucket, data)
    seen = await objects.meta(nc, bucket, name)
    assert seen is not None
    await objects.put(nc, bucket, data)  # stored again after we looked
    assert not await objects.delete_if_unchanged(nc, bucket, seen)
    assert await objects.get(nc, bucket, name) == data
    now = await objects.meta(nc, bucket, name)
    assert now is not None
    assert await objects.delete_if_unchanged(nc, bucket, now)
    with pytest.raises(objects.Missing):
        await objects.get(nc, bucket, name)
    assert [m.deleted for m in await objects.listing(nc, bucket)] == [True]
    assert await objects.put(nc, bucket, data) == name  # stored anew after a deletion
    assert await objects.get(nc, bucket, name) == data
