"""Where a one-shot command's NATS comes from without ``--nats-url``: the data directory's
cluster or single-node owner, else a temporary server of its own that it then gives up."""

from __future__ import annotations

import os
from pathlib import Path

from streamproc.config import Settings
from streamproc.natsd import owner as o
from streamproc.natsd.server import EmbeddedNats
from streamproc.natsd.session import CLUSTER_DIR, nats_session


def owner_at(url: str, **changes: object) -> o.Owner:
    fields = {"url": url, "pid": os.getpid(), "command": "nats", "node": "n", "ready": True}
    return o.Owner(started=o.now_text(), **{**fields, **changes})  # type: ignore[arg-type]


async def test_a_running_cluster_of_the_data_directory_is_used(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    lock = o.StoreLock.try_acquire(tmp_path / CLUSTER_DIR)
    assert lock is not None
    lock.publish(owner_at(f"{nats_server.url},nats://127.0.0.1:1"))
    try:
        async with nats_session(Settings(data_dir=tmp_path)) as nc:
            assert nc.is_connected and nc.connected_url is not None
            assert nc.connected_url.port == nats_server.port
        assert not (tmp_path / "nats").exists(), "no server of its own, not even a lock"
    finally:
        lock.release()


async def test_the_owner_of_the_store_is_used_and_kept(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    lock = o.StoreLock.try_acquire(tmp_path / "nats")
    assert lock is not None
    lock.publish(owner_at(nats_server.url, command="up"))
    try:
        async with nats_session(Settings(data_dir=tmp_path)) as nc:
            assert nc.connected_url is not None and nc.connected_url.port == nats_server.port
        assert o.read_owner(tmp_path / "nats") == lock.owner, "the owner's file stays"
    finally:
        lock.release()


async def test_without_an_owner_a_temporary_server_is_started_and_given_up(
    tmp_path: Path,
) -> None:
    store = tmp_path / "nats"
    async with nats_session(Settings(data_dir=tmp_path, node_id="cli")) as nc:
        record = o.read_owner(store)
        assert record is not None and record.temporary and record.ready
        assert record.pid == os.getpid() and record.node == "cli"
        assert nc.connected_url is not None and record.url.endswith(f":{nc.connected_url.port}")
        assert o.StoreLock.try_acquire(store) is None, "held while the command runs"
    assert o.read_owner(store) is None
    again = o.StoreLock.try_acquire(store)
    assert again is not None, "given up after"
    again.release()
