"""Planners partitioned by tenant on NATS's own subject mapping (``planner.partitions``):
our partition function is the server's; two planner processes share four partitions; one is
killed (SIGKILL) mid-run — after a run's events, before its work items — and the other takes
its partitions over within the lease TTL and one poll, every run planned exactly once and
every work item queued once; previews of a partition nobody serves yet are 503 with
``Retry-After``."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from pathlib import Path

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.bus.streams import DAY, EventsRetention
from streamproc.config import Settings
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, new_event
from streamproc.gateway.remote import Remote
from streamproc.hlc import wall_ms
from streamproc.ids import export_run_id, partition_of
from streamproc.names import partition_lease, plan_stream
from streamproc.natsd.server import EmbeddedNats
from streamproc.planner.partitions import ensure_stream
from streamproc.planner.role import PARTITIONED_PLANNER, PLANNER, planner_spec
from streamproc.problems import ProblemError
from streamproc.queries import PreviewRequest, preview_endpoint
from streamproc.runtime.lease import open_bucket
from tests.cluster.system import read_events
from tests.helpers import eventually
from tests.planner.partitioned import catalog, export, holders, planner, planner_env, spread_tenants

PARTITIONS = 4
TTL_S = 2.0
IMAGES = 40


async def test_our_partition_function_is_the_servers_subject_mapping(
    nc: FastClient, prefix: str, stream_names: tuple[str, str, str], publisher: Publisher
) -> None:
    events = stream_names[0]
    settings = Settings(prefix=prefix)
    tenants = [f"t{i}" for i in range(60)] + ["acme", "demo", "a", "tenant-with-dashes"]
    for n in (2, 3, 4, 7):
        name = await ensure_stream(nc, settings, n, EventsRetention())
        assert name == plan_stream(events, n)
    created = p.ScheduleCreated(schedule_id="s", name="s", cron="0 2 * * *", timezone="UTC")
    await publisher.publish_events(
        [new_event("schedule.created", t, created, f"{wall_ms()}:0:t") for t in tenants]
    )
    for n in (2, 3, 4, 7):
        stream = plan_stream(events, n)

        async def sourced(stream: str = stream) -> bool:
            info = await jsapi.stream_info(nc, stream)
            return info is not None and info.state.messages == len(tenants)

        await eventually(sourced, 20, f"{stream} sourced the log")
        for seq in range(1, len(tenants) + 1):
            doc = await jsapi.request(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
            _, plan, k, tenant, *_ = doc["message"]["subject"].split(".")
            assert plan == "plan"
            assert int(k) == partition_of(tenant, n), (tenant, n)
        await jsapi.request(nc, f"STREAM.DELETE.{stream}")


async def test_the_partitioned_stream_keeps_what_the_log_keeps(
    nc: FastClient, prefix: str, stream_names: tuple[str, str, str]
) -> None:
    """The partitioned stream copies the log, so the log's age and byte limits are its own,
    from creation on and after the operator changes them."""
    settings = Settings(prefix=prefix)
    name = await ensure_stream(nc, settings, 2, EventsRetention())
    info = await jsapi.stream_info(nc, name)
    assert info is not None
    assert (info.config["max_age"], info.config["max_bytes"], info.config["discard"]) == (
        0,
        -1,
        "new",
    )
    limited = EventsRetention(max_age_days=30, max_bytes=64 * 2**20)
    assert await ensure_stream(nc, settings, 2, limited) == name
    info = await jsapi.stream_info(nc, name)
    assert info is not None
    assert (info.config["max_age"], info.config["max_bytes"], info.config["discard"]) == (
        30 * DAY,
        64 * 2**20,
        "old",
    )
    assert info.config["sources"][0]["name"] == stream_names[0]  # the update kept the source
    await jsapi.request(nc, f"STREAM.DELETE.{name}")
    created = await ensure_stream(nc, settings, 2, limited)  # created with them, too
    info = await jsapi.stream_info(nc, created)
    assert info is not None and info.config["max_age"] == 30 * DAY
    await jsapi.request(nc, f"STREAM.DELETE.{created}")


def test_one_partition_is_the_unpartitioned_planner() -> None:
    assert planner_spec(1) is PLANNER and planner_spec(4) is PARTITIONED_PLANNER
    assert preview_endpoint("acme", 1) == "preview"
    assert preview_endpoint("acme", 4) == f"preview-p{partition_of('acme', 4)}"


def run_ids(log: list[Envelope]) -> Counter[str]:
    return Counter(e.payload.run_id for e in log if e.kind == "run.planned")


async def test_two_planners_share_four_partitions_and_one_takes_over_when_the_other_dies(
    nats_server: EmbeddedNats,
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    events, work, _ = stream_names
    tenants = spread_tenants(8, PARTITIONS)
    assert Counter(partition_of(t, PARTITIONS) for t in tenants) == dict.fromkeys(range(4), 2)
    for t in tenants:
        await publisher.publish_events(catalog(t, IMAGES))
    env = planner_env(PARTITIONS, TTL_S, STREAMPROC_PLANNER_SEGMENT_SIZE="10")
    # pa dies by SIGKILL at its 6th plan: the 2nd of its 4 runs of the second round, after
    # that run's run.planned and segments are stored and before its work items are.
    crash = {**env, "STREAMPROC_CRASH_AT": "planner.after_log_events:6"}
    remote = Remote(nc, prefix, preview_timeout_s=2, verify_timeout_s=2, partitions=PARTITIONS)
    ask = PreviewRequest(product_keys=["pkg:deb/debian/lib1"])
    try:  # nobody holds the tenant's partition yet
        await remote.preview(tenants[0], ask)
        raise AssertionError("a preview answered with no planner running")
    except ProblemError as exc:
        assert (exc.status, exc.slug) == (503, "planner-unavailable")
        assert ("Retry-After", "5") in exc.headers
    procs = [
        planner("pa", nats_server.url, prefix, tmp_path, crash),
        planner("pb", nats_server.url, prefix, tmp_path, env),
    ]
    for proc in procs:
        proc.start()
    try:

        async def shared() -> bool:
            for proc in procs:
                proc.check_alive()
            held = await holders(nc, prefix, PARTITIONS)
            return len(held) == 4 and Counter(held.values()) == {"pa": 2, "pb": 2}

        await eventually(shared, 90, "each planner holding two partitions", every=0.2)

        async def planned(want: set[str]) -> bool:
            got = set(run_ids([e for _, e in await read_events(nc, events)]))
            return want <= got

        first = {t: f"fx-{t}-1" for t in tenants}
        await publisher.publish_events([export(t, x) for t, x in first.items()])
        want = {_run(t, x) for t, x in first.items()}
        await eventually(lambda: planned(want), 90, "the first exports planned", every=0.5)

        held = await holders(nc, prefix, PARTITIONS)
        dead = sorted(k for k, h in held.items() if h == "pa")
        victim = next(t for t in tenants if partition_of(t, PARTITIONS) in dead)
        assert (await remote.preview(victim, ask)).count > 0

        second = {t: f"fx-{t}-2" for t in tenants}
        await publisher.publish_events([export(t, x) for t, x in second.items()])
        await eventually(lambda: not procs[0].running, 60, "pa killed mid-run", every=0.02)
        killed = time.monotonic()
        assert procs[0].proc is not None and procs[0].proc.returncode == -signal.SIGKILL

        statuses: list[tuple[int, bool]] = []

        async def answered() -> bool:
            try:
                await remote.preview(victim, ask)
            except ProblemError as exc:
                statuses.append((exc.status, ("Retry-After", "5") in exc.headers))
                return False
            return True

        async def taken_over() -> bool:
            procs[1].check_alive()
            return await holders(nc, prefix, PARTITIONS) == dict.fromkeys(range(4), "pb")

        await eventually(taken_over, 30, "the survivor holding every partition", every=0.1)
        takeover_s = time.monotonic() - killed
        print(f"takeover after SIGKILL: {takeover_s:.2f} s (lease TTL {TTL_S:g} s)")
        assert takeover_s < TTL_S + TTL_S / 3 + 1.5, takeover_s
        await eventually(
            answered, 60, "previews of the dead planner's partition answered", every=0.1
        )
        assert all(s == (503, True) for s in statuses), statuses

        want |= {_run(t, x) for t, x in second.items()}
        await eventually(lambda: planned(want), 90, "the second exports planned", every=0.5)
        assert procs[1].stop() == 0, procs[1].tail()
        assert await holders(nc, prefix, PARTITIONS) == {}, "a clean stop releases them"

        # Started again alone, it takes every partition back from its own checkpoints; with
        # nothing new in them it is current at once and runs each one's restart check.
        checks = procs[1].log.read_text().count("restart check done")
        procs[1].start()

        async def checked() -> bool:
            procs[1].check_alive()
            return procs[1].log.read_text().count("restart check done") >= checks + 4

        await eventually(checked, 60, "the restart check of every partition", every=0.2)
        assert (await remote.preview(victim, ask)).count > 0
        assert procs[1].stop() == 0, procs[1].tail()
    finally:
        for proc in procs:
            proc.stop()

    log = [e for _, e in await read_events(nc, events)]
    assert run_ids(log) == dict.fromkeys(want, 1)
    requested = Counter(
        x for e in log if e.kind == "run.requested" for x in e.payload.reason.feedser_export_ids
    )
    assert requested == dict.fromkeys([*first.values(), *second.values()], 1)
    segments = [e.id for e in log if e.kind == "segment.enqueued"]
    planned_segments = sum(len(e.payload.segments) for e in log if e.kind == "run.planned")
    assert len(segments) == len(set(segments)) == planned_segments > 16
    info = await jsapi.stream_info(nc, work)
    assert info is not None and info.state.messages == len(segments)
    for n in (PARTITIONS,):
        await jsapi.request(nc, f"STREAM.DELETE.{plan_stream(events, n)}")


def _run(tenant: str, export_id: str) -> str:
    return export_run_id(tenant, [export_id])


async def test_a_partition_whose_lease_ran_out_while_held_up_is_started_afresh(
    nats_server: EmbeddedNats,
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    """A planner held up past the TTL (a long fold; here SIGSTOP) finds its partitions'
    leases lapsed, though its next renewal can still succeed: nobody took them, and the
    server had not expired the entries yet (here the test keeps them, as the server's
    expiry lags the TTL). Its reactors have stopped; the partition is then handed on and
    started afresh, so its tenants' exports are still planned, once each. They waited for
    ever before: the lease renewed, nobody acting."""
    events = stream_names[0]
    tenants = spread_tenants(2, 2)
    for t in tenants:
        await publisher.publish_events(catalog(t, IMAGES))
    proc = planner("pa", nats_server.url, prefix, tmp_path, planner_env(2, TTL_S))
    proc.start()
    try:

        async def active(count: int) -> bool:
            proc.check_alive()
            return proc.log.read_text().count(": active (caught up") >= count

        await eventually(lambda: active(2), 90, "both partitions active", every=0.2)
        kv, _ = await open_bucket(nc, prefix, TTL_S)
        keys = [partition_lease(k, 2) for k in range(2)]
        assert proc.proc is not None
        for _ in range(20):  # until the reactors, not the renewal, see a lapse first
            proc.proc.send_signal(signal.SIGSTOP)
            until = time.monotonic() + 1.5 * TTL_S
            while time.monotonic() < until:  # the entries stay the planner's
                for key in keys:
                    entry = await kv.get(key)
                    await kv.update(key, entry.value or b"", last=entry.revision)
                await asyncio.sleep(0.2)
            proc.proc.send_signal(signal.SIGCONT)
            with contextlib.suppress(TimeoutError):
                await eventually(lambda: ran_out(proc.log), TTL_S, "a lapse seen", every=0.1)
                break
        assert ran_out(proc.log), proc.tail()
        exports = {t: f"fx-{t}-lapse" for t in tenants}
        await publisher.publish_events([export(t, x) for t, x in exports.items()])
        want = {_run(t, x) for t, x in exports.items()}

        async def planned() -> bool:
            proc.check_alive()
            return want <= set(run_ids([e for _, e in await read_events(nc, events)]))

        await eventually(planned, 60, "both exports planned after the lapse", every=0.5)
        assert "handing it on (its lease ran out)" in proc.log.read_text(), proc.tail()
        assert proc.stop() == 0, proc.tail()
    finally:
        proc.stop()
    log = [e for _, e in await read_events(nc, events)]
    assert run_ids(log) == dict.fromkeys(want, 1)
    await jsapi.request(nc, f"STREAM.DELETE.{plan_stream(events, 2)}")


def ran_out(log: Path) -> bool:
    return "the lease ran out; stopped acting" in log.read_text()
