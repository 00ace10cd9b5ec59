"""The scanner's catalog folded from the log: pure folds, and a scanner process that is
killed and restarted still evaluates an image it only ever learned from the log."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import msgspec

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.events.payloads import Component, ImageIndexed, ImageRemoved
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.runner.settings import RunnerSettings
from streamproc.runtime.projection import Folder
from streamproc.scanner.images import CF, ScannerImages, sbom_key
from streamproc.scanner.indexed import IndexedImages
from streamproc.state import keys
from streamproc.state.digest import state_digest
from streamproc.state.store import MemoryStore
from tests.helpers import eventually
from tests.runner.harness import Planner, events, start_runner

DATA = Path(__file__).resolve().parents[1] / "data"
SETUPTOOLS = "pkg:pypi/setuptools@65.5.0"
_hlc = iter(range(1_700_000_000_000, 1_800_000_000_000))


def digest(n: int) -> str:
    return "sha256:" + hashlib.sha256(str(n).encode()).hexdigest()


def indexed(tenant: str, n: int, purls: list[str]) -> Envelope:
    comps = [Component(purl=p, product_key=p.split("@")[0]) for p in purls]
    payload = ImageIndexed(digest=digest(n), registry="r", repository="app", components=comps)
    return new_event("image.indexed", tenant, payload, f"{next(_hlc)}:0:t")


def removed(tenant: str, n: int) -> Envelope:
    return new_event("image.removed", tenant, ImageRemoved(digest=digest(n)), f"{next(_hlc)}:0:t")


def fold(events: list[Envelope], batch: int = 1000) -> tuple[MemoryStore, Folder]:
    store = MemoryStore()
    folder = Folder(store, [ScannerImages()], "scanner")
    msgs = [(i + 1, "s", encode(e)) for i, e in enumerate(events)]
    for i in range(0, len(msgs), batch):
        part = msgs[i : i + batch]
        folder.apply(part, keys.Checkpoint("S", "epoch", part[-1][0]))
    return store, folder


def test_images_by_tenant_and_digest_share_sboms_by_content() -> None:
    a, b = ["pkg:pypi/a@1", "pkg:pypi/b@2"], ["pkg:pypi/c@3"]
    store, folder = fold([
        indexed("t1", 1, a), indexed("t1", 2, a[::-1]), indexed("t2", 1, b),
        indexed("t1", 2, b),  # re-indexed with other packages
        removed("t2", 1), removed("t2", 1),  # the second: nothing to remove
    ])  # fmt: skip
    cat = IndexedImages(store)
    assert cat.sbom_of("t1", digest(1)) == sbom_key(sorted(a))
    assert cat.sbom_of("t1", digest(2)) == sbom_key(b) and cat.purls(sbom_key(b)) == b
    assert cat.sbom_of("t2", digest(1)) is None and cat.sbom_of(None, digest(1)) == sbom_key(a)
    assert cat.sbom_of(None, digest(9)) is None and cat.count() == 2
    assert folder.rejected == 1
    # t1/1 uses a, t1/2 uses b: each stored once, with its user count; nothing else left
    assert {k for k, _ in store.scan(CF, b"s")} == {b"s" + sbom_key(x).encode() for x in (a, b)}
    store2, _ = fold([indexed("t1", 9, a), removed("t1", 9)])
    assert list(store2.scan(CF)) == []


def test_the_same_events_give_the_same_state_in_any_batching() -> None:
    evs = [indexed(f"t{n % 3}", n % 7, [f"pkg:npm/p{n % 5}@{n % 2}"]) for n in range(60)]
    evs += [removed(f"t{n % 3}", n % 7) for n in range(0, 21, 4)]
    digests = {state_digest(fold(evs, size)[0]) for size in (1, 7, 1000)}
    assert len(digests) == 1


async def test_a_restarted_scanner_process_still_knows_what_it_folded(
    nats_server: EmbeddedNats,
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    """SIGKILL the scanner, publish nothing new, start it again: the report still comes
    from the image indexed before, by tenant and image digest (no SBOM ever posted), and a
    run through a real runner evaluates the image."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [sys.executable, "-m", "streamproc.scanner", "--port", str(port),
            "--nats-url", nats_server.url, "--prefix", prefix, "--data-dir", str(tmp_path),
            "--node-id", "scanner-t", "--osv", str(DATA / "osv"), "--kev", str(DATA / "kev.json"),
            "--debian-sources", str(DATA / "osv" / "debian-sources.json")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMPROC_", "NATS_"))}

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    await publisher.publish_event(indexed("acme", 1, [SETUPTOOLS, "pkg:pypi/pyyaml@5.3.1"]))
    proc = start()
    try:
        async with aiohttp.ClientSession() as s:

            async def report() -> dict[str, object] | None:
                try:
                    body = {"imageDigest": digest(1), "tenant": "acme"}
                    async with s.post(f"{url}/reports", json=body) as r:
                        return msgspec.json.decode(await r.read()) if r.status == 200 else None
                except aiohttp.ClientError:
                    return None  # not listening (yet)

            first = await eventually(report, 30, "the scanner answers from the log")
            assert {f["vulnId"] for f in first["findings"]} >= {"GHSA-cx63-2mw6-8hw5"}  # type: ignore[index]
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc = start()
            again = await eventually(report, 30, "the restarted scanner answers")
            assert again["findings"] == first["findings"]
            assert (tmp_path / "state" / "scanner" / "CURRENT").exists()

        runner = await start_runner(tmp_path / "runner", nats_server.url, prefix,
                                    RunnerSettings(scanner_url=url))  # fmt: skip
        try:
            await Planner(publisher, prefix).run("acme", "after-restart", [digest(1)])

            async def verdict() -> list[Envelope]:
                return await events(nc, stream_names[0], "verdict.recorded")

            (v,) = await eventually(verdict, 30, "the run's verdict")
            assert v.payload.status == "ok", v.payload.error
            assert "GHSA-cx63-2mw6-8hw5" in {f.vuln_id for f in v.payload.findings}
        finally:
            await runner.close()
    finally:
        proc.kill()
        proc.wait()
