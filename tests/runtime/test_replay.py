"""Replay when the log's beginning is gone (retention or purge): refused by default, a
partial rebuild on request that says so and that the live projector can carry on from; a
role that still runs is said at once, not after the whole replay."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import REGISTRY

from streamproc.audit.entry import CHAINED_KINDS
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.cli import main
from streamproc.config import Configuration
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.projections.activity import Activity
from streamproc.roles import projections_for, rebuild
from streamproc.runtime.position import PositionError
from streamproc.runtime.projector import Projector
from streamproc.state import keys
from streamproc.state.digest import state_digest
from streamproc.state.store import RocksStore
from tests.helpers import epoch, memory_fold, messages_of, publish_samples
from tests.samples import sample_event
from tests.test_cli import cli


async def purged_log(nc: FastClient, publisher: Publisher, stream: str) -> list:
    """30 events, of which 1..10 have left the stream (as max age or max bytes would do)."""
    events = [sample_event(i) for i in range(30)]
    await publish_samples(publisher, events)
    await jsapi.request(nc, f"STREAM.PURGE.{stream}", {"seq": 11})
    info = await jsapi.stream_info(nc, stream)
    assert info is not None and info.state.first_seq == 11
    return events


async def test_replay_refuses_a_log_that_lost_its_beginning_unless_partial_is_allowed(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str], tmp_path: Path
) -> None:
    stream = stream_names[0]
    events = await purged_log(nc, publisher, stream)
    with pytest.raises(PositionError, match=r"starts at sequence 11: events 1\.\.10") as err:
        await rebuild(
            nc,
            stream,
            "activity",
            tmp_path / "refused",
            progress=False,
            configuration=Configuration(),
        )
    assert "--allow-partial" in str(err.value)
    assert not (tmp_path / "refused").exists()

    summary = await rebuild(
        nc,
        stream,
        "activity",
        tmp_path / "partial",
        progress=False,
        allow_partial=True,
        configuration=Configuration(),
    )
    assert summary.partial and summary.first_seq == 11
    assert (summary.events, summary.last_seq) == (20, 30)
    cp = keys.Checkpoint(stream, await epoch(nc, stream), 30)
    reference = memory_fold([Activity()], messages_of(publisher, events[10:], 11), cp)
    assert summary.digest == state_digest(reference), "exactly events 11..30, nothing else"

    # The live projector carries on from the partial state: no gap after its checkpoint.
    await publish_samples(publisher, [sample_event(i) for i in range(30, 35)])
    store = RocksStore(tmp_path / "partial")
    try:
        proj = await Projector(nc, store, [Activity()], stream=stream, role="t").start()
        await proj.run(until_seq=35)
        assert proj.applied == 35
    finally:
        store.close()


async def test_replay_command_warns_and_flags_a_partial_rebuild(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    await purged_log(nc, publisher, stream_names[0])
    common = ["--nats-url", nats_server.url, "--data-dir", str(tmp_path), "--prefix", prefix]
    refused = cli("replay", "--role", "activity", "--quiet", *common)
    assert refused.returncode == 2
    assert "events 1..10 have aged out" in refused.stderr
    assert "--allow-partial" in refused.stderr
    assert not (tmp_path / "state" / "activity").exists(), "nothing was swapped in"

    partial = cli("replay", "--role", "activity", "--quiet", "--allow-partial", *common)
    assert partial.returncode == 0, partial.stderr
    assert "WARNING: stream" in partial.stderr and "lacks whatever they made" in partial.stderr
    assert "replayed 20 events" in partial.stdout
    assert "PARTIAL from sequence 11; digest " in partial.stdout
    assert (tmp_path / "state" / "activity" / "CURRENT").exists()

    held = RocksStore(tmp_path / "state" / "activity")  # the role runs (`make run`)
    try:
        busy = cli("replay", "--role", "activity", "--quiet", "--allow-partial", *common)
    finally:
        held.close()
    assert busy.returncode == 2 and "stop the activity role and run replay again" in busy.stderr
    assert not (tmp_path / "state" / "activity.replay").exists(), "refused before replaying"


async def test_replay_serves_its_progress_on_a_metrics_port(
    nats_server: EmbeddedNats,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    await publish_samples(publisher, [sample_event(i) for i in range(12)])
    port = free_port()
    argv = ["replay", "--role", "activity", "--quiet", "--metrics-port", str(port)]
    argv += ["--nats-url", nats_server.url, "--data-dir", str(tmp_path), "--prefix", prefix]
    # In a thread of this process: the metrics server (a daemon thread) outlives the command.
    assert await asyncio.to_thread(main, argv) == 0
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as r:
        text = await r.text()
    assert 'streamproc_replay_applied_sequence{role="activity"} 12.0' in text

    taken = cli("replay", "--role", "activity", "--quiet", "--metrics-port", str(port), *argv[6:])
    assert taken.returncode == 2 and f"--metrics-port {port}" in taken.stderr


async def test_what_folds_tally_counts_once_live_and_not_again_on_replay(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str], tmp_path: Path
) -> None:
    events = [sample_event(i, tenants=1, node="tally") for i in range(40)]
    tenant = events[0].tenant
    chained = sum(1 for e in events if e.kind in CHAINED_KINDS)
    assert chained > 0

    def entries() -> float:
        sample = "scheduler_chain_entries_total"
        return REGISTRY.get_sample_value(sample, {"tenant": tenant}) or 0.0

    before = entries()
    await publish_samples(publisher, events)
    store = RocksStore(tmp_path / "live")
    try:
        live = Projector(
            nc,
            store,
            projections_for("auditor", Configuration()),
            stream=stream_names[0],
            role="auditor",
            batch=7,
        )
        await (await live.start()).run(until_seq=40)
        assert entries() - before == chained, "once per live event, batch by batch"
    finally:
        store.close()
    summary = await rebuild(
        nc,
        stream_names[0],
        "auditor",
        tmp_path / "rebuilt",
        progress=False,
        configuration=Configuration(),
    )
    assert summary.last_seq == 40
    assert entries() - before == chained, "a replay folds them again but counts nothing"
