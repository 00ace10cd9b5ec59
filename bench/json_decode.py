"""Decoding untyped JSON documents: the standard library's ``json``, ``orjson`` and
``msgspec.json.decode`` (no type: dicts and lists, as ``json.loads`` gives) side by side.

The documents are real ones of the kinds streamproc reads without a type: a CycloneDX SBOM
that ``cyclonedx-py environment`` makes of this Python environment (offline; skipped when the
generator is missing), the CycloneDX and SPDX SBOMs, the OSV advisories and the KEV catalog of
``tests/data``, and the OpenVEX, CycloneDX VEX and CSAF documents of ``tests/data/vex`` (a
file the standard library refuses is named and left out). Each
group is decoded as a whole (one pass: every document once), the three decoders taking turns
sample by sample so that a busy machine slows them alike; each figure is the median of the
samples. The three must give equal values for every document, or the bench stops.

Prints a table (per group: bytes, microseconds per pass, MB/s, ``json``/``orjson`` and
``msgspec``/``orjson`` time ratios), then one line of JSON: for each group its bytes and
microseconds per pass of each decoder, and the totals. It touches no network and stops by
itself (about half a minute).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SAMPLES = 9
SAMPLE_S = 0.15
"""Each sample repeats passes for at least this long."""
DECODERS: dict[str, Callable[[bytes], Any]] = {
    "json": json.loads,
    "orjson": orjson.loads,
    "msgspec": msgspec.json.decode,
}


def generated_sbom() -> list[bytes]:
    """A CycloneDX 1.6 SBOM of this environment by ``cyclonedx-py`` (none if it is missing)."""
    cli = shutil.which("cyclonedx-py", path=str(Path(sys.executable).parent))
    if cli is None:
        return []
    with tempfile.TemporaryDirectory(prefix="json-decode-") as tmp:
        out = Path(tmp) / "env.cdx.json"
        subprocess.run(
            [cli, "environment", "--of", "JSON", "-o", str(out), sys.executable],
            check=True,
            capture_output=True,
            timeout=120,
        )
        return [out.read_bytes()]


def groups() -> dict[str, list[bytes]]:
    def files(pattern: str, under: Path) -> list[bytes]:
        """The files that are JSON documents (the standard library reads them)."""
        out = []
        for path in sorted(under.glob(pattern)):
            try:
                json.loads(path.read_bytes())
            except ValueError:
                print(f"skipped (not a JSON document): {path.relative_to(ROOT)}")
                continue
            out.append(path.read_bytes())
        return out

    found = {
        "sbom: cyclonedx-py of this venv": generated_sbom(),
        "sbom: tests/data CycloneDX": files("*.cdx*.json", DATA / "sboms"),
        "sbom: tests/data SPDX": files("*.spdx*.json", DATA / "sboms"),
        "osv: tests/data advisories": files("*-*.json", DATA / "osv"),
        "kev: tests/data catalog": [(DATA / "kev.json").read_bytes()],
        "vex: tests/data (3 formats)": files("*/*.json", DATA / "vex"),
    }
    return {name: docs for name, docs in found.items() if docs}


def same_values(docs: list[bytes]) -> None:
    for doc in docs:
        values = [decode(doc) for decode in DECODERS.values()]
        if not all(v == values[0] for v in values[1:]):
            raise SystemExit("the decoders disagree on a document")


def one_sample(decode: Callable[[bytes], Any], docs: list[bytes]) -> float:
    """Seconds per pass over ``docs``, from as many passes as fit in :data:`SAMPLE_S`."""
    passes = 0
    start = time.perf_counter()
    elapsed = 0.0
    while elapsed < SAMPLE_S:
        for doc in docs:
            decode(doc)
        passes += 1
        elapsed = time.perf_counter() - start
    return elapsed / passes


def measure(docs: list[bytes]) -> dict[str, float]:
    """Median microseconds per pass, by decoder (taking turns sample by sample)."""
    times: dict[str, list[float]] = {name: [] for name in DECODERS}
    for _ in range(SAMPLES):
        for name, decode in DECODERS.items():
            times[name].append(one_sample(decode, docs))
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def main() -> int:
    found = groups()
    rows: dict[str, dict[str, Any]] = {}
    for name, docs in found.items():
        same_values(docs)
        us = measure(docs)
        rows[name] = {"documents": len(docs), "bytes": sum(map(len, docs)), "us": us}

    print(f"{'group':34} {'docs':>4} {'bytes':>9}", end="")
    for name in DECODERS:
        print(f" {name + ' us':>11} {'MB/s':>6}", end="")
    print(f" {'json/orjson':>11} {'msgspec/orjson':>14}")
    for name, row in rows.items():
        us = row["us"]
        print(f"{name:34} {row['documents']:>4} {row['bytes']:>9,}", end="")
        for dec in DECODERS:
            print(f" {us[dec]:>11,.1f} {row['bytes'] / us[dec]:>6,.0f}", end="")
        print(f" {us['json'] / us['orjson']:>11.2f} {us['msgspec'] / us['orjson']:>14.2f}")
    total = {dec: sum(r["us"][dec] for r in rows.values()) for dec in DECODERS}
    size = sum(r["bytes"] for r in rows.values())
    print(
        f"all groups: {size:,} bytes; json {total['json']:,.0f} us, orjson "
        f"{total['orjson']:,.0f} us, msgspec {total['msgspec']:,.0f} us per pass; json/orjson "
        f"{total['json'] / total['orjson']:.2f}, msgspec/orjson "
        f"{total['msgspec'] / total['orjson']:.2f}"
    )
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")
    result = {
        "groups": {
            name: {"bytes": r["bytes"], **{f"{d}_us": round(r["us"][d], 1) for d in DECODERS}}
            for name, r in rows.items()
        },
        "total_bytes": size,
        **{f"total_{d}_us": round(total[d], 1) for d in DECODERS},
        "json_vs_orjson": round(total["json"] / total["orjson"], 2),
        "msgspec_vs_orjson": round(total["msgspec"] / total["orjson"], 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
