"""Helpers for the role-process and active/standby tests: planner inputs on the real log,
reading back what was planned, and role processes started through the CLI."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
from nats.js.errors import KeyWrongLastSequenceError

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, new_event
from streamproc.hlc import wall_ms
from streamproc.natsd.cluster import free_ports
from streamproc.runtime.lease import Lease, bucket_name
from tests.helpers import eventually
from tests.planner.harness import events_of

TENANT = "t1"


def _ev(kind: str, payload: p.Payload) -> Envelope:
    return new_event(kind, TENANT, payload, f"{wall_ms()}:0:test")


async def publish_planner_inputs(pub: Publisher, images: int = 20) -> None:
    """A schedule subscribed to Feedser and ``images`` indexed images using lib0..lib3."""
    schedule = p.ScheduleCreated(
        schedule_id="s1", name="s1", cron="0 2 * * *", timezone="UTC", subscriptions=["feedser"]
    )
    indexed = [
        _ev(
            "image.indexed",
            p.ImageIndexed(
                digest=f"sha256:{n:064x}",
                registry="registry.local",
                repository="team/app",
                components=[
                    p.Component(
                        purl=f"pkg:deb/debian/lib{n % 4}@1.0",
                        product_key=f"pkg:deb/debian/lib{n % 4}",
                        used=True,
                    )
                ],
            ),
        )
        for n in range(images)
    ]
    await pub.publish_events([_ev("schedule.created", schedule), *indexed])


async def publish_export(pub: Publisher, export_id: str) -> int:
    export = p.FeedserExport(export_id=export_id, changed_product_keys=["pkg:deb/debian/lib1"])
    ack = await pub.publish_event(_ev("export.feedser", export))
    return ack.seq


async def planned(nc: FastClient, stream: str) -> list[Envelope]:
    return await events_of(nc, stream, "run.planned")


wait_for = eventually


def start_role(
    role: str, url: str, prefix: str, data: Path, port: int, **env: str
) -> subprocess.Popen[bytes]:
    """``streamproc <role>`` as its own process; its output goes to ``<data>.log``."""
    full = dict(os.environ)
    full.update(env)
    data.parent.mkdir(parents=True, exist_ok=True)
    with open(log_of(data), "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "streamproc.cli", role, "--nats-url", url, "--prefix", prefix,
             "--data-dir", str(data), "--node-id", data.name, "--http-port", str(port)],
            env=full, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def log_of(data: Path) -> Path:
    return data.with_name(f"{data.name}.log")


async def readyz(port: int) -> dict[str, Any] | None:
    """The process's /readyz document, or None while it does not answer."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as s,
            s.get(f"http://127.0.0.1:{port}/readyz") as r,
        ):
            doc: dict[str, Any] = await r.json()
            return doc
    except (aiohttp.ClientError, TimeoutError):
        return None


async def wait_ready(
    proc: subprocess.Popen[bytes], port: int, data: Path, timeout: float = 20
) -> dict[str, Any]:
    async def up() -> dict[str, Any] | None:
        if proc.poll() is not None:
            out = log_of(data).read_text()[-2000:]
            raise AssertionError(f"process exited {proc.returncode}: {out}")
        doc = await readyz(port)
        return doc if doc and doc.get("status") == "ready" else None

    result: dict[str, Any] = await wait_for(up, timeout, f"/readyz on port {port}", every=0.1)
    return result


def stop(proc: subprocess.Popen[bytes], timeout: float = 20) -> int:
    """SIGTERM and wait (SIGKILL if it does not stop); returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def start_pair(
    role: str, url: str, prefix: str, tmp: Path, names: tuple[str, str], **env: str
) -> tuple[list[subprocess.Popen[bytes]], tuple[int, int], tuple[Path, Path]]:
    """Two processes of ``role``, each with its own data directory and port."""
    ports = tuple(free_ports("127.0.0.1", 2))
    dirs = tmp / names[0], tmp / names[1]
    procs = [start_role(role, url, prefix, d, p, **env) for d, p in zip(dirs, ports, strict=True)]
    return procs, ports, dirs


async def take_lease(lease: Lease) -> bool:
    """Put another holder into the lease key, as after an expiry the holder slept through.
    The holder renews meanwhile: use with ``wait_for`` (it fails on a stale revision)."""
    try:
        await lease.kv.update(lease.key, b"elsewhere/1/ff", last=lease.revision)
    except KeyWrongLastSequenceError:
        return False
    return True


async def drop_lease_bucket(nc: FastClient, prefix: str) -> None:
    with contextlib.suppress(jsapi.JsApiError):
        await jsapi.request(nc, f"STREAM.DELETE.KV_{bucket_name(prefix)}")
