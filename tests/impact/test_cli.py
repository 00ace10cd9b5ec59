"""``streamproc index add|remove|stats`` as subprocesses, with the real SBOMs in
tests/data/sboms, the real nats-server and a real impact state directory. (Run through
``python -m streamproc.impact.cli``, which mounts the same ``register`` the main CLI will.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.impact import pending
from streamproc.impact.projection import ImpactProjection
from streamproc.impact.selector import Selector
from streamproc.natsd.server import EmbeddedNats
from streamproc.runtime.projection import Folder
from streamproc.runtime.projector import Projector
from streamproc.sbom.parse import read_sbom
from streamproc.sbom.purls import normalize_purl
from streamproc.state.store import RocksStore
from tests.impact.helpers import Model, digest, random_events
from tests.impact.test_pending import deferred, fold_batches

SBOMS = Path(__file__).parent.parent / "data" / "sboms"
FILES = ["debian-base.cdx15.json", "tools-nested.cdx16.json", "python-app.spdx23.json"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamproc.impact.cli", "index", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _head(nc: FastClient, stream: str) -> int:
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    return info.state.last_seq


async def _fold(nc: FastClient, stream: str, state: Path, until: int) -> None:
    store = RocksStore(state)
    try:
        proj = await Projector(
            nc, store, [ImpactProjection(warm_on_start=False)], stream=stream, role="impact"
        ).start()
        await proj.run(until_seq=until)
    finally:
        store.close()


async def test_add_remove_stats_with_real_sboms(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    stream = stream_names[0]
    nats = ["--nats-url", nats_server.url, "--prefix", prefix]
    used = tmp_path / "used.txt"
    python_purls = read_sbom(SBOMS / FILES[2]).purls
    used.write_text("# entrypoint\n" + "\n".join(python_purls[:3]) + "\n")
    for i, name in enumerate(FILES):
        extra = ["--used-purls", str(used)] if i == 2 else []
        r = cli("add", "--tenant", "acme", "--image", digest(i), "--repo", "ghcr.io/acme/app",
                "--namespace", "prod", "--tag", f"v{i}", "--label", "team=core",
                "--sbom", str(SBOMS / name), *extra, *nats)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "published image.indexed" in r.stdout
        assert ("(3 used)" if i == 2 else "(usage unknown)") in r.stdout
    head = await _head(nc, stream)
    assert head == 3

    # unchanged: nothing new; a bad purl or too many purls: refused, nothing published
    r = cli("add", "--tenant", "acme", "--image", digest(0), "--repo", "ghcr.io/acme/app",
            "--namespace", "prod", "--tag", "v0", "--label", "team=core",
            "--sbom", str(SBOMS / FILES[0]), *nats)  # fmt: skip
    assert r.returncode == 0 and "already indexed" in r.stdout, r.stderr
    doc = json.loads((SBOMS / FILES[0]).read_text())
    doc["components"][5]["purl"] = "pkg:deb/debian/bad%zzname@1"
    bad = tmp_path / "bad.cdx.json"
    bad.write_text(json.dumps(doc))
    r = cli("add", "--tenant", "acme", "--image", digest(9), "--repo", "x/y",
            "--sbom", str(bad), *nats)  # fmt: skip
    assert r.returncode == 2
    assert "pkg:deb/debian/bad%zzname@1" in r.stderr and "percent-encoding" in r.stderr
    assert "nothing was published" in r.stderr
    huge = tmp_path / "huge.cdx.json"
    comps = [
        {"type": "library", "name": f"p{i}", "purl": f"pkg:pypi/p{i}@1"} for i in range(100_001)
    ]
    huge.write_text(
        json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.5", "components": comps})
    )
    r = cli("add", "--tenant", "acme", "--image", digest(8), "--repo", "x/y",
            "--sbom", str(huge), *nats)  # fmt: skip
    assert r.returncode == 2 and "at most 100000" in r.stderr
    assert await _head(nc, stream) == head

    state = tmp_path / "data" / "state" / "impact"
    await _fold(nc, stream, state, head)
    r = cli("stats", "--state-dir", str(state), "--json")
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout)
    purls = {normalize_purl(p) for name in FILES for p in read_sbom(SBOMS / name).purls}
    assert stats["images"] == 3 and stats["tenants"] == 1 and stats["usageKnownImages"] == 1
    assert stats["productKeys"] == len({n.product_key for n in purls})
    assert stats["purls"] == len({n.purl for n in purls})
    assert stats["bitmapBytes"] > 0 and stats["warm"] is None
    r = cli("stats", "--state-dir", str(state))
    assert r.returncode == 0 and "images          3 (1 with usage data)" in r.stdout

    store = RocksStore(state, read_only=True)
    try:
        proj = ImpactProjection(warm_on_start=False)
        proj.open(store)
        sel = Selector(tenant="acme", namespaces=["prod"], repos=["ghcr.io/acme/app"])
        r2 = proj.index.resolve_by_purls(["pkg:pypi/msgspec"], False, sel)
        assert sorted(r2.digests()) == sorted([digest(1), digest(2)])
        # image 2 says what its entrypoint uses; image 1 has no usage data: all of it counts
        first = normalize_purl(python_purls[0]).purl
        got = proj.index.resolve_by_purls([first], True, sel)
        assert sorted(got.digests()) == sorted([digest(1), digest(2)])
        assert got.usage_unknown == 1
        unused = normalize_purl(python_purls[-1]).purl
        assert proj.index.resolve_by_purls([unused], False, sel).digests() == [digest(2)]
        assert proj.index.resolve_by_purls([unused], True, sel).count == 0
        assert proj.index.resolve_all(Selector(tenant="acme", include_tags=["v1"])).count == 1
    finally:
        store.close()

    r = cli("remove", "--tenant", "acme", "--image", digest(1), *nats)
    assert r.returncode == 0 and "published image.removed" in r.stdout, r.stderr
    r = cli("remove", "--tenant", "acme", "--image", digest(1), *nats)
    assert r.returncode == 0 and "not indexed" in r.stdout
    assert await _head(nc, stream) == head + 1
    await _fold(nc, stream, state, head + 1)
    r = cli("stats", "--state-dir", str(state), "--json")
    assert json.loads(r.stdout)["images"] == 2


def test_stats_on_a_state_without_the_index_says_where_the_index_is(tmp_path: Path) -> None:
    other = tmp_path / "gateway"
    RocksStore(other).close()  # a role's state directory that folds no impact index
    r = cli("stats", "--state-dir", str(other))
    assert r.returncode == 2, r
    assert "holds no impact index" in r.stderr
    assert "state/planner-p<k>-of-<N>" in r.stderr


def test_stats_count_the_images_whose_ids_wait_to_be_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state directory as a crash leaves it mid-import: ids folded, not merged yet."""
    monkeypatch.setattr(pending, "MERGE_SLICE", 1)  # one group merged per batch
    state = tmp_path / "planner"
    store = RocksStore(state)
    try:
        proj = deferred()
        fold_batches(Folder(store, [proj], "impact"), random_events(8, 120), 0, Model())
        waiting = proj.index.pending_images
        assert waiting > 0
    finally:
        store.close()
    r = cli("stats", "--state-dir", str(state), "--json")
    assert r.returncode == 0, r
    assert json.loads(r.stdout)["pendingImages"] == waiting
    r = cli("stats", "--state-dir", str(state))
    assert f"pending         {waiting:,} images not merged" in r.stdout
