"""VEX ingestion: a 10,000-statement OpenVEX document through ``PUT /vex/{documentId}`` to
its recorded ``export.vexer``, on the product's own path at default settings.

``streamproc up --demo`` runs in a temporary directory on free ports (every role, the
embedded NATS server); this process mints a development token with ``streamproc token
issue`` and PUTs the document: the gateway decodes it, checks it against the OpenVEX JSON
Schema, normalises 10,000 statements to claims, compares them with the claims held and
records the ``export.vexer`` of the 10,000 that changed (a new document). The time is the
PUT's, until its 202 (the event acknowledged by JetStream). Each trial sends a new document
id; then, once the read model has folded them, identical re-sends (nothing changes: the
version held is read from the document subject's last event, the bytes are not parsed).
Beside it, in this process, the baseline: decoding the same bytes and a bare normalisation
loop (tuples of the statement's purl, vulnerability, status and justification; no schema, no
purl parsing).

Prints a table, then one line of JSON: ``vex_statements_per_s`` (median of the trials),
``vex_put_ms``, ``export_vexer_bytes`` (the stored event), ``unchanged_put_ms`` (median),
``baseline_statements_per_s`` and ``ratio`` (product / baseline). Only 127.0.0.1 is
targeted; it stops by itself.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from streamproc.natsd.server import free_port

STATEMENTS = 10_000
TRIALS = 5
CLI = [sys.executable, "-m", "streamproc.cli"]


def document(n: int, tag: str) -> bytes:
    """An OpenVEX 0.2.0 document of ``n`` statements, each a distinct (package, CVE)."""
    statements = [
        {
            "vulnerability": {"name": f"CVE-2024-{i:05d}"},
            "products": [{"@id": f"pkg:pypi/bench-{tag}-{i % 997}@1.{i % 13}.0"}],
            "status": "not_affected" if i % 3 else "affected",
            **(
                {"justification": "vulnerable_code_not_in_execute_path"}
                if i % 3
                else {"action_statement": "upgrade"}
            ),
        }
        for i in range(n)
    ]
    return orjson.dumps(
        {
            "@context": "https://openvex.dev/ns/v0.2.0",
            "@id": f"https://example.com/vex/bench-{tag}",
            "author": "bench",
            "timestamp": "2025-06-01T00:00:00Z",
            "version": 1,
            "statements": statements,
        }
    )


def baseline(data: bytes) -> float:
    """Seconds to decode ``data`` and turn its statements into bare tuples."""
    t0 = time.perf_counter()
    doc = orjson.loads(data)
    out = []
    for st in doc["statements"]:
        for product in st["products"]:
            out.append(
                (product["@id"], st["vulnerability"]["name"], st["status"], st.get("justification"))
            )
    assert len(out) == STATEMENTS
    return time.perf_counter() - t0


async def start(cwd: Path) -> tuple[subprocess.Popen[bytes], dict[str, str], str]:
    ports = {"NATS": free_port(), "HTTP": free_port(), "SCANNER": free_port()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPROC_")}
    env.pop("NATS_URL", None)
    env.update({f"STREAMPROC_{k}_PORT": str(v) for k, v in ports.items()})
    proc = subprocess.Popen(
        [*CLI, "up", "--demo"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    seen = b""
    while b"Press Ctrl-C" not in seen:
        line = await asyncio.to_thread(proc.stdout.readline)
        if not line or time.monotonic() > deadline:
            raise RuntimeError(f"up --demo did not start:\n{seen.decode()[-2000:]}")
        seen += line
    return proc, env, f"http://127.0.0.1:{ports['HTTP']}"


def token(cwd: Path, env: dict[str, str]) -> str:
    argv = [*CLI, "token", "issue", "--key", "data/dev/issuer.jwk", "--tenant", "demo",
            "--scope", "scheduler.vex.write", "--scope", "scheduler.read"]  # fmt: skip
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def stored_size(cwd: Path, env: dict[str, str], seq: int) -> int:
    """Bytes of the event at ``seq`` as the event log stores it."""
    from nats.aio.client import Client  # deferred: only for this one look-up

    port = env["STREAMPROC_NATS_PORT"]
    nc = Client()
    await nc.connect(f"nats://127.0.0.1:{port}")
    try:
        msg = await nc.request(
            "$JS.API.STREAM.MSG.GET.SCHEDULER", json.dumps({"seq": seq}).encode(), timeout=10
        )
        return len(base64.b64decode(json.loads(msg.data)["message"]["data"]))
    finally:
        await nc.close()


async def put(http: aiohttp.ClientSession, url: str, tok: str, body: bytes) -> tuple[float, Any]:
    headers = {"Authorization": f"Bearer {tok}", "Content-Type": "application/json"}
    t0 = time.perf_counter()
    async with http.put(url, data=body, headers=headers) as r:
        answer = await r.json()
        elapsed = time.perf_counter() - t0
        assert r.status in (200, 202), answer
    return elapsed, answer


async def folded(http: aiohttp.ClientSession, url: str, tok: str) -> None:
    """Wait until the gateway's read model shows the last document (its folds are done)."""
    headers = {"Authorization": f"Bearer {tok}"}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        async with http.get(url, headers=headers) as r:
            if r.status == 200:
                return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} never showed up")


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-vex-") as tmp:
        cwd = Path(tmp)
        proc, env, gateway = await start(cwd)
        try:
            tok = await asyncio.to_thread(token, cwd, env)
            api = f"{gateway}/api/v1/scheduler/vex"
            docs = [document(STATEMENTS, f"t{i}") for i in range(TRIALS)]
            base = [baseline(d) for d in docs]
            times: list[float] = []
            size = 0
            timeout = aiohttp.ClientTimeout(total=120)
            async with aiohttp.ClientSession(timeout=timeout) as http:
                for i, body in enumerate(docs):
                    elapsed, answer = await put(http, f"{api}/bench-{i}", tok, body)
                    assert answer["changedClaims"] == STATEMENTS, answer
                    times.append(elapsed)
                    if i == 0:
                        size = await stored_size(cwd, env, answer["seq"])
                await folded(http, f"{api}/bench-{TRIALS - 1}", tok)
                resends = []
                for _ in range(TRIALS):
                    elapsed, answer = await put(http, f"{api}/bench-0", tok, docs[0])
                    assert answer["unchanged"], answer
                    resends.append(elapsed)
                again = statistics.median(resends)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    put_s = statistics.median(times)
    base_s = statistics.median(base)
    rate, base_rate = STATEMENTS / put_s, STATEMENTS / base_s
    print(f"{'path':<48} {'median ms':>10} {'statements/s':>14}")
    print(f"{'PUT /vex/{id} -> export.vexer recorded (202)':<48} {put_s * 1000:>10.1f} "
          f"{rate:>14,.0f}")  # fmt: skip
    print(f"{'baseline: json decode + bare normalisation':<48} {base_s * 1000:>10.1f} "
          f"{base_rate:>14,.0f}")  # fmt: skip
    print(f"{'identical re-send (200, nothing recorded)':<48} {again * 1000:>10.1f}")
    print(
        f"export.vexer of {STATEMENTS} changed claims: {size:,} bytes stored; "
        f"trials {', '.join(f'{t * 1000:.0f}' for t in times)} ms; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print(
        json.dumps(
            {
                "vex_statements": STATEMENTS,
                "vex_statements_per_s": round(rate),
                "vex_put_ms": round(put_s * 1000, 1),
                "export_vexer_bytes": size,
                "unchanged_put_ms": round(again * 1000, 1),
                "baseline_statements_per_s": round(base_rate),
                "ratio": round(rate / base_rate, 4),
                "load_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
