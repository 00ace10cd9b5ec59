"""Gateway webhook throughput and latency, against a real nats-server, over loopback.

Three processes besides nats-server: this orchestrator (idle while measuring), the gateway
server (``--serve``), and the load generator — Debian's ``wrk`` with a Lua script when it is
installed, else an aiohttp generator (``--load``). Each request is a distinct Feedser export
signed with HMAC-SHA256. Measured in the same run, beside an empty aiohttp route on the same
server:

* the accepted-request ceiling (closed loop, 32 connections), and
* latency at a steady 1,000 requests/s (open loop, latency counted from each request's
  scheduled send time, so a stall is not hidden by the generator waiting).

Prints a table, the webhook ceiling beside the empty route's with their ratio, then one line
of JSON: accepted_per_s, p99_ms_at_1000, empty_route_per_s, accepted_vs_empty, and the CPU
time the gateway process and nats-server spent per webhook at the ceiling
(gateway_cpu_us_per_request, nats_cpu_us_per_request: on a shared machine these move far
less with the load than the rates do). ``--profile
FILE`` runs only the webhook ceiling, with the gateway under cProfile, and writes its top
functions to FILE. Only 127.0.0.1 is targeted; every phase is bounded in time. Ports are
free ones, or ``STREAMPROC_NATS_PORT`` and ``STREAMPROC_HTTP_PORT`` when set.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

SECRET = "bench-hmac-secret"
ISSUER_SEED = b"bench-issuer-key-seed-0123456789"[:32]
"""The issuer of the sender's token (a bearer token: the bench server admits ``bearer``)."""
HOOK = "/api/v1/scheduler/events/feedser-export"
HERE = Path(__file__).resolve()
CONNECTIONS = 32
MAX_SECONDS, RATE_SECONDS, RATE = 10, 10, 1000

# --------------------------------------------------------------------------- requests


def make_requests(path: Path, n: int, tag: str) -> None:
    """One signed delivery per line: timestamp, delivery id, signature, the sender's access
    token, body (tab-separated)."""
    from nacl.signing import SigningKey

    from streamproc.gateway.tokens_cli import mint_token

    ts = str(int(time.time()))
    key = SECRET.encode()
    token = mint_token(
        SigningKey(ISSUER_SEED), {"kid": "bench", "iss": "https://authority.bench"},
        tenant="bench", scope="scheduler.webhook", ttl=86_400,
    )  # fmt: skip
    with path.open("w") as f:
        for i in range(n):
            body = json.dumps(
                {
                    "exportId": f"{tag}-{i}",
                    "changedProductKeys": ["pkg:rpm/openssl", f"pkg:npm/p{i % 997}"],
                    "kev": ["CVE-2025-0001"],
                    "window": {"from": "2025-10-01T00:00:00Z", "to": "2025-10-02T00:00:00Z"},
                },
                separators=(",", ":"),
            )
            sig = hmac.new(key, ts.encode() + b"." + body.encode(), hashlib.sha256).hexdigest()
            f.write(f"{ts}\t{tag}-{i}\tsha256={sig}\t{token}\t{body}\n")


LUA = r"""
local reqs, n, i, pause = {}, 0, 0, nil
function init(args)
  if args[3] then pause = tonumber(args[3]) end
  for line in io.lines(args[1]) do
    local ts, d, sig, tok, body = line:match("([^\t]+)\t([^\t]+)\t([^\t]+)\t([^\t]+)\t(.*)")
    n = n + 1
    reqs[n] = wrk.format("POST", args[2], {
      ["Content-Type"] = "application/json", ["X-Scheduler-Timestamp"] = ts,
      ["X-Scheduler-Delivery"] = d, ["X-Scheduler-Signature"] = sig,
      ["Authorization"] = "Bearer " .. tok}, body)
  end
end
function delay()
  return pause or 0
end
function request()
  i = i + 1
  if i > n then i = 1 end
  return reqs[i]
end
"""


# --------------------------------------------------------------------------- server


def serve(args: argparse.Namespace) -> int:
    """The gateway role plus an empty route, in one process, until SIGTERM."""
    import uvloop
    from aiohttp import web
    from nacl.signing import SigningKey

    from streamproc import roles
    from streamproc.config import Settings
    from streamproc.gateway.auth.jwt import b64url
    from streamproc.gateway.role import make_mount
    from streamproc.gateway.settings import GatewaySettings, Issuer, IssuerKey, WebhookSource
    from streamproc.readmodel import READ_MODEL
    from streamproc.roles import System
    from streamproc.runtime.reactor import RoleContext, RoleSpec

    public = b64url(bytes(SigningKey(ISSUER_SEED).verify_key))
    gs = GatewaySettings(
        required_modes=["bearer"],
        issuers=[
            Issuer(
                issuer="https://authority.bench",
                tenants=["bench"],
                keys=[IssuerKey(kid="bench", public_key=public)],
            )
        ],
        webhooks=[
            WebhookSource(name="feedser", kind="feedser", tenants=["bench"], hmac_secrets=[SECRET])
        ],
        access_log=args.access_log,
    )
    gateway = make_mount(gs)

    async def empty(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def post_body(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="ok")

    def mount(app: web.Application, ctx: RoleContext) -> None:
        gateway(app, ctx)
        app.router.add_get("/empty", empty)
        app.router.add_post("/empty", post_body)

        async def publish_only(request: web.Request) -> web.Response:
            from streamproc.events.envelope import new_event
            from streamproc.events.payloads import FeedserExport
            from streamproc.ids import uuid7

            await request.read()
            e = new_event(
                "export.feedser", "naive", FeedserExport(export_id=uuid7()), ctx.clock.now()
            )
            ack = await ctx.publisher.publish_event(e)
            return web.Response(text=str(ack.seq))

        app.router.add_post("/naive", publish_only)

    roles.ROLES["bench-gateway"] = RoleSpec(list(READ_MODEL), routes=mount)
    settings = Settings(
        data_dir=Path(args.data_dir),
        nats_url=args.nats_url,
        prefix="bench",
        http_port=args.port,
        node_id="bench",
    )

    async def main() -> int:
        system = System(settings, ["bench-gateway"])
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await system.start()
        print("READY", flush=True)
        await stop.wait()
        proj = system.projectors["bench-gateway"]
        print(json.dumps({"applied": proj.applied}), flush=True)
        await system.close()
        return 0

    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        try:
            return uvloop.run(main())
        finally:
            prof.disable()
            with open(args.profile, "w") as out:
                for order, n in (("tottime", 30), ("cumulative", 60)):
                    pstats.Stats(prof, stream=out).sort_stats(order).print_stats(n)
    return uvloop.run(main())


# --------------------------------------------------------------------------- generator


def load(args: argparse.Namespace) -> int:
    """aiohttp load generator: closed loop (--concurrency) or open loop (--rate)."""
    import aiohttp
    import uvloop

    lines = Path(args.file).read_text().splitlines()
    reqs = []
    for line in lines:
        ts, d, sig, tok, body = line.split("\t", 4)
        reqs.append(
            (
                body.encode(),
                {
                    "Content-Type": "application/json",
                    "X-Scheduler-Timestamp": ts,
                    "X-Scheduler-Delivery": d,
                    "X-Scheduler-Signature": sig,
                    "Authorization": f"Bearer {tok}",
                },
            )
        )

    async def main() -> dict[str, float]:
        conn = aiohttp.TCPConnector(limit=args.connections, force_close=False)
        lat: list[float] = []
        ok = bad = 0
        nxt = 0
        async with aiohttp.ClientSession(connector=conn) as s:

            async def one(body: bytes, headers: dict[str, str], due: float) -> None:
                nonlocal ok, bad
                method = s.post if args.path != "/empty" else s.get
                kw = {"data": body, "headers": headers} if args.path != "/empty" else {}
                async with method(args.url + args.path, **kw) as r:
                    await r.read()
                    lat.append(time.perf_counter() - due)
                    if 200 <= r.status < 300:
                        ok += 1
                    else:
                        bad += 1

            t0 = time.perf_counter()
            end = t0 + args.duration
            if args.rate:
                tasks = []
                interval = 1.0 / args.rate
                k = 0
                while True:
                    due = t0 + k * interval
                    if due >= end:
                        break
                    now = time.perf_counter()
                    if due > now:
                        await asyncio.sleep(due - now)
                    body, headers = reqs[nxt % len(reqs)]
                    nxt += 1
                    tasks.append(asyncio.create_task(one(body, headers, due)))
                    k += 1
                await asyncio.gather(*tasks)
            else:

                async def worker() -> None:
                    nonlocal nxt
                    while time.perf_counter() < end:
                        body, headers = reqs[nxt % len(reqs)]
                        nxt += 1
                        await one(body, headers, time.perf_counter())

                await asyncio.gather(*(worker() for _ in range(args.connections)))
            elapsed = time.perf_counter() - t0
        lat.sort()
        pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000  # noqa: E731
        return {
            "ok": ok,
            "bad": bad,
            "seconds": elapsed,
            "rps": (ok + bad) / elapsed,
            "p50_ms": pick(0.5),
            "p99_ms": pick(0.99),
            "max_ms": lat[-1] * 1000,
        }

    print(json.dumps(uvloop.run(main())), flush=True)
    return 0


# --------------------------------------------------------------------------- orchestrator


def run_wrk(
    url: str,
    seconds: int,
    script: Path | None,
    req_file: Path | None,
    path: str = HOOK,
    conns: int = CONNECTIONS,
    pause_ms: int = 0,
) -> dict[str, float]:
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency"]
    if script is not None:
        cmd += ["-s", str(script), url, "--", str(req_file), path]
        if pause_ms:
            cmd.append(str(pause_ms))
    else:
        cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    secs = float(re.search(r"requests in ([\d.]+)s", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    bad = int(non2xx.group(1)) if non2xx else 0
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    return {
        "ok": total - bad,
        "bad": bad,
        "seconds": secs,
        "rps": total / secs,
        "p99_ms": float(p99.group(1)) * scale[p99.group(2)] if p99 else float("nan"),
    }


def run_gen(url: str, path: str, req_file: Path, **kw: object) -> dict[str, float]:
    cmd = [
        sys.executable,
        str(HERE),
        "--load",
        "--url",
        url,
        "--path",
        path,
        "--file",
        str(req_file),
    ]
    for k, v in kw.items():
        cmd += [f"--{k}", str(v)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


Row = tuple[str, str, float, float, float]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def steady(url: str, tmp: Path, lua: Path, use_wrk: bool) -> tuple[list[Row], float]:
    """Steady 1,000 requests/s, first, on a fresh server: wrk paced by delay() (C, light on
    the shared CPUs), and the open-loop aiohttp generator (latency counted from each
    request's scheduled time, so stalls are not hidden; heavier on CPU). The rows, and the
    webhook's p99 at that rate (wrk's when there is wrk)."""
    rows: list[Row] = []
    paced: dict[str, dict[str, float]] = {}
    if use_wrk:  # 50 connections, each pausing 48 ms after a response: ~1,000/s
        make_requests(tmp / "paced-empty.tsv", 10, "pe")
        paced["empty"] = run_wrk(
            url, RATE_SECONDS, lua, tmp / "paced-empty.tsv", path="/empty", conns=50, pause_ms=48
        )
        make_requests(tmp / "paced.tsv", 2 * RATE * RATE_SECONDS, f"pc-{uuid.uuid4().hex[:8]}")
        paced["hook"] = run_wrk(url, RATE_SECONDS, lua, tmp / "paced.tsv", conns=50, pause_ms=48)
        for name, label in (("empty", "empty route"), ("hook", "feedser webhook")):
            r = paced[name]
            ok = r["ok"] / r["seconds"]
            rows.append((label, "~1000/s, wrk paced", r["rps"], ok, r["p99_ms"]))
    make_requests(tmp / "rate-empty.tsv", 10, "re")
    er = run_gen(
        url, "/empty", tmp / "rate-empty.tsv", rate=RATE, duration=RATE_SECONDS, connections=256
    )
    mode = f"{RATE}/s open loop (aiohttp)"
    rows.append(("empty route", mode, er["rps"], er["ok"] / er["seconds"], er["p99_ms"]))
    make_requests(tmp / "rate.tsv", RATE * RATE_SECONDS + 100, f"rate-{uuid.uuid4().hex[:8]}")
    hr = run_gen(url, HOOK, tmp / "rate.tsv", rate=RATE, duration=RATE_SECONDS, connections=256)
    rows.append(("feedser webhook", mode, hr["rps"], hr["ok"] / hr["seconds"], hr["p99_ms"]))
    if hr["bad"]:
        print(f"warning: {hr['bad']} refused requests at {RATE}/s", file=sys.stderr)
    return rows, paced["hook"]["p99_ms"] if "hook" in paced else hr["p99_ms"]


def webhook_ceiling(url: str, tmp: Path, lua: Path, use_wrk: bool) -> dict[str, float]:
    """Signed webhooks, closed loop, 32 connections, every one a new export."""
    n_max = 15_000 * MAX_SECONDS
    make_requests(tmp / "max.tsv", n_max, f"max-{uuid.uuid4().hex[:8]}")
    if use_wrk:
        hook = run_wrk(url, MAX_SECONDS, lua, tmp / "max.tsv")
    else:
        hook = run_gen(url, HOOK, tmp / "max.tsv", duration=MAX_SECONDS, connections=CONNECTIONS)
    if hook["ok"] + hook["bad"] > n_max:
        raise SystemExit("request file exhausted; raise n_max (repeats would be refused)")
    if hook["bad"]:
        print(f"warning: {hook['bad']} refused webhook requests at the ceiling", file=sys.stderr)
    return hook


def orchestrate(args: argparse.Namespace) -> int:
    from streamproc.natsd.server import EmbeddedNats, free_port

    use_wrk = shutil.which("wrk") is not None and not args.no_wrk
    gen = f"max, {CONNECTIONS} conns ({'wrk' if use_wrk else 'aiohttp'})"
    tmp = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    # Fixed ports when asked (a shared machine's port plan), else free ones.
    nats_port = int(os.environ.get("STREAMPROC_NATS_PORT") or free_port())
    nats = EmbeddedNats(tmp / "nats", port=nats_port).start()
    port = int(os.environ.get("STREAMPROC_HTTP_PORT") or free_port())
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, str(HERE), "--serve", "--nats-url", nats.url, "--port", str(port),
           "--data-dir", str(tmp / "data"), "--access-log", str(tmp / "access.log")]  # fmt: skip
    if args.profile:
        cmd += ["--profile", str(Path(args.profile).resolve())]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    rows: list[Row] = []
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "READY":
            raise SystemExit("gateway server did not start")
        lua = tmp / "hook.lua"
        lua.write_text(LUA)
        if args.profile:  # the webhook ceiling alone, under cProfile
            hook = webhook_ceiling(url, tmp, lua, use_wrk)
            print(f"profiled {hook['ok']:,.0f} accepted webhooks: {args.profile}")
            return 0
        rows, p99_at_rate = steady(url, tmp, lua, use_wrk)
        # Ceilings: the empty route, a bare publish, then signed webhooks.
        if use_wrk:
            empty = run_wrk(url + "/empty", MAX_SECONDS, None, None)
        else:
            make_requests(tmp / "empty.tsv", 10, "e")
            empty = run_gen(
                url, "/empty", tmp / "empty.tsv", duration=MAX_SECONDS, connections=CONNECTIONS
            )
        rows.append(("empty route", gen, empty["rps"], empty["rps"], empty["p99_ms"]))
        if use_wrk:  # context: one bare publish per request, no checks (the issue's "naive")
            make_requests(tmp / "naive.tsv", 10, "n")
            naive = run_wrk(url, MAX_SECONDS, lua, tmp / "naive.tsv", path="/naive")
            ok = naive["ok"] / naive["seconds"]
            rows.append(("bare publish", gen, naive["rps"], ok, naive["p99_ms"]))
        assert nats.proc is not None
        cpu0 = cpu_seconds(server.pid), cpu_seconds(nats.proc.pid)
        hook = webhook_ceiling(url, tmp, lua, use_wrk)
        cpu1 = cpu_seconds(server.pid), cpu_seconds(nats.proc.pid)
        # CPU per request: what a shared machine's load does not change much, unlike rates.
        handled = hook["ok"] + hook["bad"]
        cpu_us = [round((b - a) / handled * 1e6) for a, b in zip(cpu0, cpu1, strict=True)]
        accepted = hook["ok"] / hook["seconds"]
        rows.append(("feedser webhook", gen, hook["rps"], accepted, hook["p99_ms"]))
    finally:
        server.send_signal(signal.SIGTERM)
        tail = server.communicate(timeout=120)[0]
        nats.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    applied = json.loads(tail.strip().splitlines()[-1])["applied"] if tail.strip() else -1
    print(f"{'route':<17} {'load':<28} {'sent/s':>9} {'2xx/s':>9} {'p99 ms':>8}")
    for route, mode, sent, ok, p99 in rows:
        print(f"{route:<17} {mode:<28} {sent:>9,.0f} {ok:>9,.0f} {p99:>8.2f}")
    print(f"events recorded in the log and folded by the gateway's read model: {applied:,}")
    ratio = accepted / empty["rps"]
    print(
        f"ceiling, {CONNECTIONS} connections: webhooks accepted {accepted:,.0f}/s | "
        f"empty route {empty['rps']:,.0f}/s | ratio {ratio:.2f} (target >= 0.45)"
    )
    print(
        f"CPU per webhook at the ceiling: gateway process {cpu_us[0]} us, "
        f"nats-server {cpu_us[1]} us"
    )
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")
    print(
        json.dumps(
            {
                "accepted_per_s": round(accepted),
                "p99_ms_at_1000": round(p99_at_rate, 2),
                "empty_route_per_s": round(empty["rps"]),
                "accepted_vs_empty": round(ratio, 3),
                "gateway_cpu_us_per_request": cpu_us[0],
                "nats_cpu_us_per_request": cpu_us[1],
            }
        )
    )
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-wrk", action="store_true", help="use the aiohttp generator only")
    p.add_argument("--nats-url")
    p.add_argument("--port", type=int)
    p.add_argument("--data-dir")
    p.add_argument("--access-log", default="off")
    p.add_argument(
        "--profile",
        metavar="FILE",
        help="run only the 32-connection webhook phase, with the gateway under cProfile; "
        "write its top functions (by own time, then cumulative) to FILE",
    )
    p.add_argument("--url")
    p.add_argument("--path")
    p.add_argument("--file")
    p.add_argument("--rate", type=int, default=0)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--connections", type=int, default=CONNECTIONS)
    args = p.parse_args()
    if args.serve:
        return serve(args)
    if args.load:
        return load(args)
    return orchestrate(args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
