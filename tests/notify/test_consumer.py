"""The Notify-side consumer (Python API and ``streamproc notify tail``) resumes where it left
off, and never re-filters a durable another reader follows; the committed JSON Schemas match
the code; messages round-trip."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import msgspec
import pytest

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.natsd.server import EmbeddedNats
from streamproc.notify import messages as nm
from streamproc.notify.consumer import ConsumerConflict, NotifyConsumer, default_durable, render
from streamproc.notify.schemas import TYPES
from streamproc.notify.schemas import render as render_schema
from tests.helpers import eventually
from tests.notify.feedkit import delta, publish

ROOT = Path(__file__).resolve().parents[2]


async def test_durable_consumer_resumes_after_the_last_acknowledged(
    nc: FastClient, publisher: Publisher, prefix: str, stream_names: tuple[str, str, str]
) -> None:
    await publish(publisher, prefix, [delta("acme", i) for i in range(5)] + [delta("globex", 0)])
    async with NotifyConsumer(nc, durable="pager", prefix=prefix, tenant="acme") as feed:
        # A fetch hands over what has arrived so far: the five may come in several.
        batch = await received(feed, 5)
        assert [m.id for m, _, _ in batch] == [f"d-acme-{i}" for i in range(5)]
        for _m, _seq, reply in batch[:3]:
            await feed.ack(reply)
    await publish(publisher, prefix, [delta("acme", 5)])
    async with NotifyConsumer(
        nc, durable="pager", prefix=prefix, tenant="acme", ack_wait_s=1
    ) as feed:
        got = [m.id for m, _, _ in await received(feed, 3, ack=True)]
        more = await feed.fetch(timeout=1.5)  # past ack_wait: anything unacked would be back
    # The two delivered but unacknowledged come again; the acknowledged three never do.
    assert sorted(got) == ["d-acme-3", "d-acme-4", "d-acme-5"], got
    assert more == []


async def received(
    feed: NotifyConsumer, n: int, *, ack: bool = False
) -> list[tuple[nm.AnyMessage, int, bytes]]:
    """Fetch until ``n`` messages arrived (acknowledging each at once with ``ack``)."""
    out: list[tuple[nm.AnyMessage, int, bytes]] = []

    async def enough() -> bool:
        for item in await feed.fetch(timeout=1):
            out.append(item)
            if ack:
                await feed.ack(item[2])
        return len(out) >= n

    await eventually(enough, timeout=20, what=f"{n} messages")
    return out


def test_the_default_durable_names_the_selection() -> None:
    assert default_durable(None, ["rescan.delta"]) == "notify-tail"
    assert default_durable("demo", ["run.summary", "rescan.delta"]) == (
        "notify-tail-demo-rescan-delta-run-summary"
    )
    assert default_durable(None, ["report.ready"]) == "notify-tail-all-report-ready"


async def test_a_durable_that_follows_other_subjects_is_refused_not_refiltered(
    nc: FastClient, prefix: str, stream_names: tuple[str, str, str]
) -> None:
    async with NotifyConsumer(nc, durable="shared", prefix=prefix, tenant="acme"):
        pass
    followed = r"'shared' on \S+ follows \S+\.acme\.rescan\.delta, not"
    with pytest.raises(ConsumerConflict, match=followed):
        await NotifyConsumer(nc, durable="shared", prefix=prefix, tenant="globex").start()
    info = await jsapi.request(nc, f"CONSUMER.INFO.{stream_names[2]}.shared")
    assert info["config"]["filter_subject"] == f"{prefix}.notify.acme.rescan.delta", "untouched"


TAIL = [sys.executable, "-m", "streamproc.cli"]


def tail(url: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TAIL, "notify", "tail", "--nats-url", url, "--prefix", prefix, "--once", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


async def test_notify_tail_cli_prints_and_resumes(
    nats_server: EmbeddedNats, publisher: Publisher, prefix: str, stream_names: tuple[str, str, str]
) -> None:
    def lines(*args: str) -> list[str]:
        out = tail(nats_server.url, prefix, *args)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    await publish(publisher, prefix, [delta("acme", 0), delta("acme", 1), delta("globex", 2)])
    first = lines("--tenant", "acme", "--durable", "cli")
    assert len(first) == 2 and "rescan.delta" in first[0] and "+1 high" in first[0]
    await publish(publisher, prefix, [delta("acme", 7)])
    second = lines("--tenant", "acme", "--durable", "cli")
    assert len(second) == 1 and "sha256:000000000000" in second[0]
    # Tails of other selections have consumers of their own: each sees all of its messages.
    assert len(lines()) == 4 and len(lines("--tenant", "globex")) == 1
    refused = tail(nats_server.url, prefix, "--tenant", "globex", "--durable", "cli")
    assert refused.returncode == 2 and refused.stdout == ""
    assert "'cli' on" in refused.stderr and "pass another --durable, or --reset" in refused.stderr
    assert lines("--tenant", "acme", "--durable", "cli") == [], "its reader's position is kept"
    taken = lines("--tenant", "globex", "--durable", "cli", "--reset")
    assert len(taken) == 1 and "globex" in taken[0]


def test_committed_schemas_match_the_code_and_validate_messages() -> None:
    for name in TYPES:
        path = ROOT / "schemas" / "notify" / f"{name}.json"
        assert path.read_text() == render_schema(name), f"run make schemas ({path})"
    schema = msgspec.json.decode((ROOT / "schemas/notify/rescan.delta.json").read_bytes())
    doc = msgspec.json.decode(nm.encode(delta("acme", 1)))
    jsonschema.validate(doc, schema)
    summary = nm.RunSummary(
        id="s", tenant="acme", run_id="r", ts="2026-01-01T00:00:00.000Z", state="completed",
        vulnerabilities=[nm.VulnImages(vuln_id="CVE-1", severity="high", image_count=1,
                                       images=["sha256:" + "0" * 64])],
    )  # fmt: skip
    jsonschema.validate(
        msgspec.json.decode(nm.encode(summary)),
        msgspec.json.decode((ROOT / "schemas/notify/run.summary.json").read_bytes()),
    )
    assert nm.decode(nm.encode(summary)) == summary
    assert "run.summary" in render(summary)
    assert "evaluated=" not in render(summary)
    # A run that stopped says how far it got, not a bare "no new findings".
    failed = nm.RunSummary(
        id="e", tenant="acme", run_id="r", ts="2026-01-01T00:00:00.000Z", state="error",
        totals=nm.RunTotals(candidates=4, completed=1, failed=3),
    )  # fmt: skip
    assert " error evaluated=1/4 failed=3 deltas=0: no new findings" in render(failed)


@pytest.mark.parametrize("how", ["stopped", "killed"])
async def test_notify_tail_says_so_when_the_server_goes_away(tmp_path: Path, how: str) -> None:
    """Stopped (``make run`` ended: the server says so) or killed without a word (``kill -9``,
    a crash: the tail's reconnects give up after ~10 s): either way the tail exits 1 and
    says so, never waits in silence."""
    from streamproc.bus import streams
    from streamproc.bus.connect import connect
    from streamproc.natsd.server import free_port

    server = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    try:
        nc = await connect(server.url)
        await streams.apply(nc, streams.definitions("scheduler"))
        argv = [*TAIL, "notify", "tail", "--nats-url", server.url]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        async def following() -> bool:
            with contextlib.suppress(jsapi.JsApiError):
                await jsapi.request(nc, "CONSUMER.INFO.SCHEDULER_NOTIFY.notify-tail")
                return True
            return False

        await eventually(following, 30, "the tail follows the Notify stream")
        await nc.close()
    finally:
        if how == "killed" and server.proc is not None:
            server.proc.kill()
            server.proc.wait()
        server.stop()  # what stopping `make run` does to a tail beside it
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "NATS went away" in err and "resumes after the last message it printed" in err


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
async def test_notify_tail_stops_on_a_signal_even_started_with_sigint_ignored(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    sig: int,
    code: int,
) -> None:
    """A background job of a script inherits SIGINT ignored, and Python keeps that: the tail
    installs its own handlers, so ``kill -INT`` stops it (130) and ``kill -TERM`` too (0),
    both after its cleanup, as ``streamproc up`` does."""
    argv = [*TAIL, "notify", "tail", "--nats-url", nats_server.url, "--prefix", prefix]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    try:

        async def following() -> bool:
            with contextlib.suppress(jsapi.JsApiError):
                await jsapi.request(nc, f"CONSUMER.INFO.{stream_names[2]}.notify-tail")
                return True
            return False

        await eventually(following, 30, "the tail follows the Notify stream")
        proc.send_signal(sig)
        _, err = await asyncio.to_thread(proc.communicate, timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == code and "Traceback" not in err, err
