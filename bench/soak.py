"""A soak of ``streamproc up`` as an operator runs it: does memory plateau, does latency hold?

``streamproc up --demo`` (every role in one process, the demo catalog, default settings) runs
on free loopback ports under a steady mix for ``--minutes``:

* 100 signed Feedser webhooks/s, each a distinct exportId over the demo catalog's packages
  (signed and presenting a DPoP-bound token, as ``streamproc feedser export`` sends them);
* 50 GET/s, alternating ``/runs`` and ``/schedules``, DPoP-signed by the client module every
  command of ours uses (a token bound to the data directory's client key, minted with
  ``streamproc token issue`` from the demo's development issuer);
* a manual run (``POST /run``) every 30 s.

Requests are sent open loop (latency counted from each request's scheduled time, so a stall
is not hidden by the generator waiting). Every 15 s a row: RSS of ``up`` and of its
nats-server, their open fds, p50/p99 of webhooks and GETs over the window, and JetStream's
own accounting (``/varz`` memory, the event stream's messages and subjects, the replay
bucket's keys). At the end, after the load stops: every webhook answered 202 must be in the
event log exactly once, and every run must have completed.

Usage: ``python bench/soak.py [--minutes 10] [--keep DIR]``. Prints the table, then one line
of JSON: soak_minutes, lost, duplicated, runs, runs_stuck, rss_up_slope_mb_per_min and
rss_nats_slope_mb_per_min (least squares over the second half), p99_webhook_growth and
p99_get_growth (last window / first steady window), http_5xx, largest_runs_response_bytes,
and the load average at the start and the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamproc.bus.connect import connect  # noqa: E402
from streamproc.client.dpop import DpopKey  # noqa: E402
from streamproc.client.http import ApiClient, Unreachable  # noqa: E402
from streamproc.client.tokens import StaticToken  # noqa: E402
from streamproc.events.envelope import decode  # noqa: E402
from streamproc.names import API_BASE, replay_bucket, stream_names  # noqa: E402
from streamproc.natsd.cluster import free_ports  # noqa: E402
from streamproc.sbom.parse import parse_sbom  # noqa: E402
from streamproc.sbom.purls import normalize_image_purls  # noqa: E402
from streamproc.scanner.demo import DATA as DEMO_DATA  # noqa: E402
from streamproc.scanner.feedser import WEBHOOK_PATH, signed_headers  # noqa: E402

TENANT = "demo"
WINDOW_S = 15.0
STEADY_AFTER_S = 60.0
"""The first window starting this long after the load began is the "first steady" one."""
DRAIN_S = 180.0
"""After the load: how long runs get to complete (the planner's debounce is 30 s)."""
MAX_IN_FLIGHT = 256
"""Requests outstanding at once; beyond, a request waits (and its latency shows it)."""


def now() -> float:
    return time.monotonic()


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(seconds, MB)`` in MB per minute."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    den = sum((t - mx) ** 2 for t, _ in points)
    return 0.0 if den == 0 else 60.0 * sum((t - mx) * (v - my) for t, v in points) / den


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def demo_product_keys() -> list[str]:
    """Every product key of the demo catalog (what ``up --demo`` indexes)."""
    keys: set[str] = set()
    for path in sorted((DEMO_DATA / "sboms").glob("*.json")):
        for n in normalize_image_purls(parse_sbom(path.read_bytes()).purls):
            keys.add(n.product_key)
    return sorted(keys)


# ----------------------------------------------------------------------------- the system


@dataclass
class Up:
    """``streamproc up --demo`` on free ports in a directory of its own."""

    root: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    """Settings for ``up`` beyond its defaults (an A/B of one setting: ``--env``)."""
    code: str | None = None
    """Another tree's ``streamproc`` package to run (``--code``: an A/B of two builds)."""
    proc: subprocess.Popen[str] | None = None
    ports: dict[str, int] = field(default_factory=dict)
    output: list[str] = field(default_factory=list)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.ports['http']}{API_BASE}"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.ports['http']}"

    @property
    def monitor(self) -> str:
        return f"http://127.0.0.1:{self.ports['monitor']}"

    @property
    def ops(self) -> str:
        return f"http://127.0.0.1:{self.ports['ops']}"

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.ports['nats']}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("STREAMPROC_", "NATS_URL"))}  # fmt: skip
        env["STREAMPROC_SCANNER_PORT"] = str(self.ports["scanner"])
        env["STREAMPROC_NATS_MONITOR_PORT"] = str(self.ports["monitor"])
        env["STREAMPROC_OPS_PORT"] = str(self.ports["ops"])
        if self.code:
            env["PYTHONPATH"] = self.code
        return {**env, **self.extra_env}

    def start(self, timeout: float = 180.0) -> None:
        names = ("nats", "http", "scanner", "monitor", "ops")
        self.ports = dict(zip(names, free_ports("127.0.0.1", len(names)), strict=True))
        cmd = [sys.executable, "-m", "streamproc.cli", "up", "--demo",
               "--data-dir", str(self.data), "--nats-port", str(self.ports["nats"]),
               "--http-port", str(self.ports["http"])]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, cwd=self.root, env=self.env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        deadline = now() + timeout
        while now() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("streamproc up exited:\n" + "".join(self.output[-30:]))
            self.output.append(line)
            if "Press Ctrl-C" in line:
                break
        else:
            raise TimeoutError("streamproc up did not start")
        # Keep reading its output, so a full pipe never blocks it.
        threading_reader(self.proc, self.output)

    def nats_pid(self) -> int:
        doc = json.loads((self.data / "nats" / "owner.json").read_text())
        return int(doc["server_pids"][0])

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "streamproc.cli", *args], cwd=self.root, env=self.env(),
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return out.stdout.strip()

    def stop(self) -> str:
        if self.proc is None or self.proc.poll() is not None:
            return "not running"
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return "killed after 60 s"
        time.sleep(0.2)
        return "stopped cleanly" if any("stopped cleanly" in x for x in self.output) else "?"


def threading_reader(proc: subprocess.Popen[str], sink: list[str]) -> None:
    import threading

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            sink.append(line)
            del sink[:-200]

    threading.Thread(target=read, daemon=True).start()


# ----------------------------------------------------------------------------- the load


@dataclass
class Window:
    start: float
    webhook_ms: list[float] = field(default_factory=list)
    get_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0


@dataclass
class Load:
    up: Up
    api: ApiClient
    http: aiohttp.ClientSession
    secret: str
    keys: list[str]
    tag: str
    windows: list[Window] = field(default_factory=list)
    accepted: set[str] = field(default_factory=set)
    """exportIds answered 202."""
    manual_runs: list[str] = field(default_factory=list)
    http_5xx: int = 0
    problems: dict[str, int] = field(default_factory=dict)
    """5xx answers by ``status type`` (the problem document's)."""
    largest_runs: int = 0
    sem: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_IN_FLIGHT))
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    seq: int = 0

    @property
    def window(self) -> Window:
        return self.windows[-1]

    def note(self, status: int, body: bytes = b"") -> None:
        w = self.window
        w.statuses[status] = w.statuses.get(status, 0) + 1
        if status >= 500:
            self.http_5xx += 1
            try:
                kind = str(msgspec.json.decode(body).get("type", "")).rsplit(":", 1)[-1]
            except (msgspec.DecodeError, AttributeError):
                kind = "?"
            key = f"{status} {kind}"
            self.problems[key] = self.problems.get(key, 0) + 1

    async def webhook(self, due: float) -> None:
        self.seq += 1
        export_id = f"soak-{self.tag}-{self.seq:09d}"
        body = msgspec.json.encode({
            "exportId": export_id,
            "changedProductKeys": random.sample(self.keys, 3),
            "kev": [],
        })  # fmt: skip
        headers = signed_headers(body, f"{export_id}.1", secret=self.secret)
        async with self.sem:
            try:  # signed, and with the DPoP-bound token the source takes besides
                reply = await self.api.request(
                    "POST", self.up.base + WEBHOOK_PATH, tenant=TENANT, data=body, headers=headers
                )
            except Unreachable:
                self.window.errors += 1
                return
            answer, status = reply.body, reply.status
        self.window.webhook_ms.append((now() - due) * 1000)
        self.note(status, answer)
        if status == 202:
            self.accepted.add(export_id)

    async def get(self, due: float, path: str) -> None:
        async with self.sem:
            try:
                reply = await self.api.request("GET", self.up.api + path, tenant=TENANT)
            except Unreachable:
                self.window.errors += 1
                return
        self.window.get_ms.append((now() - due) * 1000)
        self.note(reply.status, reply.body)
        if path == "/runs":
            self.largest_runs = max(self.largest_runs, len(reply.body))

    async def manual_run(self) -> None:
        try:
            reply = await self.api.request(
                "POST", self.up.api + "/run", tenant=TENANT, json={"reason": "soak"}
            )
        except Unreachable:
            self.window.errors += 1
            return
        self.note(reply.status, reply.body)
        if reply.status in (201, 202):
            self.manual_runs.append(reply.headers["Location"].rsplit("/", 1)[1])

    def spawn(self, coro: Any) -> None:
        t = asyncio.ensure_future(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    async def run(self, seconds: float, webhooks_per_s: float, gets_per_s: float,
                  run_every_s: float, on_window: Any) -> None:  # fmt: skip
        t0 = now()
        self.windows.append(Window(0.0))
        next_hook = next_get = t0
        next_run = t0
        next_window = t0 + WINDOW_S
        gets = 0
        while True:
            t = now()
            if t >= t0 + seconds:
                break
            while next_hook <= t:
                self.spawn(self.webhook(next_hook))
                next_hook += 1.0 / webhooks_per_s
            while next_get <= t:
                gets += 1
                self.spawn(self.get(next_get, "/runs" if gets % 2 else "/schedules"))
                next_get += 1.0 / gets_per_s
            if next_run <= t:
                self.spawn(self.manual_run())
                next_run += run_every_s
            if next_window <= t:
                done = self.window
                self.windows.append(Window(next_window - t0))
                next_window += WINDOW_S
                self.spawn(on_window(done, next_window - WINDOW_S - t0))
            await asyncio.sleep(max(0.0, min(next_hook, next_get, next_run, next_window) - now()))
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=60)

    def cancel(self) -> None:
        for t in self.tasks:
            t.cancel()


# ----------------------------------------------------------------------------- accounting


@dataclass
class Sample:
    t: float
    rss_up: float
    rss_nats: float
    fds_up: int
    fds_nats: int
    varz_mem: float
    events: int
    subjects: int
    replay_keys: int
    parts: dict[str, float]
    """``up``'s own figures (``streamproc_memory_bytes``), MB."""
    window: Window | None
    cpu_up: float = 0.0
    cpu_nats: float = 0.0
    """CPU seconds each has used so far."""
    cpu_up_pct: float = 0.0
    cpu_nats_pct: float = 0.0
    """Their CPU over the window, in % of one core."""


async def js_accounting(nc: Any, up: Up) -> tuple[int, int, int]:
    """The event stream's messages and subjects, the replay bucket's live keys."""
    events, _, _ = stream_names("scheduler")
    out = []
    for name in (events, f"KV_{replay_bucket('scheduler')}"):
        try:
            msg = await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)
            state = json.loads(msg.data).get("state", {})
        except Exception:
            state = {}
        out.append(state)
    return (out[0].get("messages", -1), out[0].get("num_subjects", -1),
            out[1].get("messages", -1))  # fmt: skip


async def memory_parts(http: aiohttp.ClientSession, up: Up) -> dict[str, float]:
    """``streamproc_memory_bytes{part}`` from ``up``'s ops listener, in MB."""
    out: dict[str, float] = {}
    try:
        async with http.get(up.ops + "/metrics") as r:
            text = await r.text()
    except Exception:
        return out
    for line in text.splitlines():
        if line.startswith('streamproc_memory_bytes{part="'):
            name, value = line[len('streamproc_memory_bytes{part="') :].split('"} ')
            out[name] = float(value) / 2**20
    return out


async def varz_mem(http: aiohttp.ClientSession, up: Up) -> float:
    try:
        async with http.get(up.monitor + "/varz") as r:
            return float((await r.json())["mem"]) / 2**20
    except Exception:
        return float("nan")


async def exports_in_log(nc: Any, tag: str) -> dict[str, int]:
    """How many times each of this soak's exportIds is in the event log."""
    js = nc.jetstream()
    counts: dict[str, int] = {}
    events, _, _ = stream_names("scheduler")
    info = await js.stream_info(events)
    last = info.state.last_seq
    done = asyncio.Event()
    prefix = f"soak-{tag}-"

    async def cb(msg: Any) -> None:
        if msg.metadata.sequence.stream >= last:
            done.set()
        try:
            event = decode(msg.data)
        except Exception:
            return
        export_id = getattr(event.payload, "export_id", None)
        if event.kind == "export.feedser" and export_id and export_id.startswith(prefix):
            counts[export_id] = counts.get(export_id, 0) + 1

    sub = await js.subscribe(f"scheduler.events.{TENANT}.>", cb=cb, ordered_consumer=True)
    await asyncio.wait_for(done.wait(), 600)
    await sub.unsubscribe()
    return counts


async def runs_by_state(api: ApiClient, up: Up) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    cursor = None
    while True:
        params = {"limit": "200"}
        if cursor:
            params["cursor"] = cursor
        reply = await api.request("GET", up.api + "/runs", tenant=TENANT, params=params)
        doc = reply.json()
        for item in doc.get("items", []):
            out.setdefault(item["state"], []).append(item["id"])
        cursor = doc.get("nextCursor")
        if not cursor:
            return out


# ----------------------------------------------------------------------------- main


COLUMNS = [
    "min",
    "rss_up",
    "rss_nats",
    "varz",
    "cpu_up",
    "cpu_n",
    "fd_up",
    "fd_n",
    "hook/s",
    "hk_p50",
    "hk_p99",
    "get/s",
    "gt_p50",
    "gt_p99",
    "5xx",
    "events",
    "subjects",
    "replay",
    "memtbl",
    "bcache",
    "m_used",
    "m_free",
]
"""Per window: minutes in; RSS of up and nats-server and nats' own /varz figure (MB); the
CPU each used over the window (% of a core); open fds; webhooks/s and their p50/p99 (ms);
GETs/s and theirs; 5xx answers; the event stream's messages and subjects; the replay
bucket's live keys; up's memtables, block cache, glibc heap in use and freed-but-kept (MB,
its streamproc_memory_bytes)."""


def row(s: Sample) -> str:
    w = s.window
    hook = w.webhook_ms if w else []
    get = w.get_ms if w else []
    n5 = sum(v for k, v in (w.statuses.items() if w else []) if k >= 500)
    mb = [s.parts.get(k, -1.0) for k in
          ("rocksdb_memtables", "rocksdb_block_cache", "malloc_in_use", "malloc_free")]  # fmt: skip
    cells = [f"{s.t / 60:.2f}", f"{s.rss_up:.1f}", f"{s.rss_nats:.1f}", f"{s.varz_mem:.1f}",
             f"{s.cpu_up_pct:.0f}", f"{s.cpu_nats_pct:.0f}",
             str(s.fds_up), str(s.fds_nats), f"{len(hook) / WINDOW_S:.1f}",
             f"{pct(hook, .5):.1f}", f"{pct(hook, .99):.1f}", f"{len(get) / WINDOW_S:.1f}",
             f"{pct(get, .5):.1f}", f"{pct(get, .99):.1f}", str(n5), str(s.events),
             str(s.subjects), str(s.replay_keys), *(f"{v:.1f}" for v in mb)]  # fmt: skip
    return " ".join(f"{c:>{max(6, len(h))}}" for c, h in zip(cells, COLUMNS, strict=True))


HEADER = " ".join(f"{h:>{max(6, len(h))}}" for h in COLUMNS)


async def soak(args: argparse.Namespace, up: Up) -> dict[str, Any]:
    secret = (up.data / "dev" / "feedser.secret").read_text().strip()
    jkt = up.cli("token", "client-key", "--data-dir", str(up.data))
    token = up.cli("token", "issue", "--key", str(up.data / "dev" / "issuer.jwk"),
                   "--tenant", TENANT, "--scope", "scheduler.admin", "--jkt", jkt,
                   "--ttl", "86400")  # fmt: skip
    key = DpopKey.load_or_create(up.data / "client" / "dpop.jwk")
    up_pid, nats_pid = up.proc.pid, up.nats_pid()  # type: ignore[union-attr]
    nc = await connect(up.nats_url, name="soak")
    samples: list[Sample] = []
    timeout = aiohttp.ClientTimeout(total=30)
    connector = aiohttp.TCPConnector(limit=MAX_IN_FLIGHT)
    async with (
        ApiClient(key, StaticToken(token, key), timeout_s=30) as api,
        aiohttp.ClientSession(timeout=timeout, connector=connector) as http,
    ):
        load = Load(up, api, http, secret, demo_product_keys(), f"{int(time.time())}")

        async def sample(w: Window | None, t: float) -> None:
            events, subjects, replay = await js_accounting(nc, up)
            s = Sample(t, rss_mb(up_pid), rss_mb(nats_pid), fds(up_pid), fds(nats_pid),
                       await varz_mem(http, up), events, subjects, replay,
                       await memory_parts(http, up), w, cpu_s(up_pid), cpu_s(nats_pid))  # fmt: skip
            if samples and t > samples[-1].t:
                dt = t - samples[-1].t
                s.cpu_up_pct = 100 * (s.cpu_up - samples[-1].cpu_up) / dt
                s.cpu_nats_pct = 100 * (s.cpu_nats - samples[-1].cpu_nats) / dt
            samples.append(s)
            print(row(s), flush=True)

        load_start = load_avg()
        cpu0 = cpu_s(up_pid), cpu_s(nats_pid)
        print(f"load average at the start: {load_start}")
        print(HEADER)
        await sample(None, 0.0)
        try:
            await load.run(args.minutes * 60, args.webhooks_per_s, args.gets_per_s,
                           args.run_every_s, sample)  # fmt: skip
        finally:
            load.cancel()
        load_end = load_avg()
        cpu = cpu_s(up_pid) - cpu0[0], cpu_s(nats_pid) - cpu0[1]
        requests = sum(len(w.webhook_ms) + len(w.get_ms) for w in load.windows)
        # Drain: every run completes (the last exports coalesce into one more run).
        deadline = now() + DRAIN_S
        while True:
            states = await runs_by_state(api, up)
            open_runs = sum(len(v) for k, v in states.items() if k not in TERMINAL)
            if open_runs == 0 or now() > deadline:
                break
            await asyncio.sleep(2)
        await sample(None, args.minutes * 60 + (DRAIN_S - max(0.0, deadline - now())))
        counts = await exports_in_log(nc, load.tag)
    await nc.close()
    lost = sum(1 for e in load.accepted if counts.get(e, 0) == 0)
    duplicated = sum(1 for c in counts.values() if c > 1)
    manual_missing = sum(1 for r in load.manual_runs
                         if r not in {i for v in states.values() for i in v})  # fmt: skip
    runs = sum(len(v) for v in states.values())
    stuck = runs - len(states.get("completed", [])) + manual_missing
    half = args.minutes * 30
    second = [s for s in samples if s.window is not None and s.t >= half]
    steady = [s for s in samples if s.window is not None and s.window.start >= STEADY_AFTER_S]
    first, last = (steady[0], steady[-1]) if steady else (None, None)

    def growth(attr: str) -> float:
        if first is None or last is None:
            return float("nan")
        a = pct(getattr(first.window, attr), 0.99)
        b = pct(getattr(last.window, attr), 0.99)
        return round(b / a, 3) if a else float("nan")

    return {
        "soak_minutes": args.minutes,
        "lost": lost,
        "duplicated": duplicated,
        "accepted": len(load.accepted),
        "runs": runs,
        "runs_stuck": stuck,
        "rss_up_slope_mb_per_min": round(slope_per_min([(s.t, s.rss_up) for s in second]), 3),
        "rss_nats_slope_mb_per_min": round(slope_per_min([(s.t, s.rss_nats) for s in second]), 3),
        "p99_webhook_growth": growth("webhook_ms"),
        "p99_get_growth": growth("get_ms"),
        "http_5xx": load.http_5xx,
        "http_5xx_by_type": load.problems,
        "up_cpu_ms_per_request": round(1000 * cpu[0] / max(1, requests), 3),
        "nats_cpu_ms_per_request": round(1000 * cpu[1] / max(1, requests), 3),
        "request_errors": sum(w.errors for w in load.windows),
        "largest_runs_response_bytes": load.largest_runs,
        "rss_up_mb_end": round(samples[-1].rss_up, 1),
        "rss_nats_mb_end": round(samples[-1].rss_nats, 1),
        "load_start": load_start,
        "load_end": load_end,
        "states": {k: len(v) for k, v in states.items()},
    }


TERMINAL = {"completed", "error", "cancelled"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--webhooks-per-s", type=float, default=100.0)
    p.add_argument("--gets-per-s", type=float, default=50.0)
    p.add_argument("--run-every-s", type=float, default=30.0)
    p.add_argument("--keep", help="keep the data directory here (default: a removed temp dir)")
    p.add_argument("--code", help="run streamproc from this tree instead (an A/B of builds)")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for streamproc up (repeatable; default: none, the defaults)",
    )
    args = p.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="soak-"))
    root.mkdir(parents=True, exist_ok=True)
    up = Up(root, dict(kv.split("=", 1) for kv in args.env), args.code)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop `up` on the way out
    up.start()
    try:
        result = asyncio.run(soak(args, up))
    finally:
        stopped = up.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    result["up_stop"] = stopped
    result["env"] = up.extra_env
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
