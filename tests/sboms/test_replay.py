"""SBOMs survive a full replay: the state directories are thrown away, every role that
keeps SBOM references is rebuilt with ``streamproc replay``, and ``GET
/images/{digest}/sbom`` answers the bytes that were sent, the runner finds the SBOM to give
a tool, and the planner counts the image's use of it (its retention)."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from pathlib import Path

import aiohttp
import pytest

from streamproc.cli import main
from streamproc.config import Configuration, Settings
from streamproc.devsetup import prepare_dev_auth
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import System, projections_for
from streamproc.runner.sboms import sbom_reader
from streamproc.runtime.projection import Folder, StateFormatError
from streamproc.sboms.refs import users
from streamproc.scanner.demo import DATA
from streamproc.state.store import RocksStore
from tests.test_cli import cli

ROLES = ["gateway", "planner", "runner"]


async def test_sboms_survive_a_full_replay_from_the_streams(
    nats_server: EmbeddedNats,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("STREAMPROC_GATEWAY_CONFIG", "STREAMPROC_FEEDSER_SECRET"):
        monkeypatch.delenv(name, raising=False)  # prepare_dev_auth sets them: restored after
    settings = Settings(
        data_dir=tmp_path / "data", nats_url=nats_server.url, prefix=prefix, http_port=free_port()
    )
    dev = prepare_dev_auth(settings)
    settings = dev.settings
    path = DATA / "sboms" / "debian-libs.spdx22.json"
    sent = path.read_bytes()
    digest = "sha256:" + hashlib.sha256(b"image " + sent).hexdigest()
    key = "sha256:" + hashlib.sha256(sent).hexdigest()
    common = ["--nats-url", nats_server.url, "--prefix", prefix]
    argv = ["index", "add", *common, "--tenant", "demo", "--image", digest,
            "--repo", "ghcr.io/acme/libs", "--sbom", str(path)]  # fmt: skip
    assert await asyncio.to_thread(main, argv) == 0

    system = System(settings, ROLES)
    await system.start()
    try:
        for role in ROLES:
            await system.projectors[role].wait_for(1, 10)
    finally:
        await system.close()

    shutil.rmtree(settings.data_dir / "state")
    for role in ROLES:
        argv = ["replay", "--role", role, "--quiet", *common, "--data-dir", str(settings.data_dir)]
        assert await asyncio.to_thread(main, argv) == 0, role

    system = System(settings, ROLES)
    await system.start()
    try:
        assert sbom_reader(system.contexts["runner"].store)("demo", digest) == key
        assert users(system.contexts["planner"].store, key) == 1
        assert dev.issuer_key is not None
        issued = cli("token", "issue", "--key", str(dev.issuer_key), "--tenant", "demo",
                     "--scope", "scheduler.read")  # fmt: skip
        assert issued.returncode == 0, issued.stderr
        url = f"{system.http_url}/api/v1/scheduler/images/{digest}/sbom"
        headers = {"Authorization": f"Bearer {issued.stdout.strip()}"}
        async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as r:
            assert r.status == 200, await r.text()
            assert await r.read() == sent
    finally:
        await system.close()


@pytest.mark.parametrize(("role", "added"), [("runner", "runner_sboms"), ("planner", "sbom_refs")])
def test_state_of_the_build_before_sbom_references_is_refused_pointing_at_replay(
    tmp_path: Path, role: str, added: str
) -> None:
    """A state directory written without the new projection has folded every image without
    it: opening it refuses (exit code 2) and names ``streamproc replay``, which rebuilds it
    with the references (the test above)."""
    store = RocksStore(tmp_path / role)
    try:
        Folder(store, [x for x in projections_for(role, Configuration()) if x.name != added])
        with pytest.raises(StateFormatError, match="rebuild it with `streamproc replay`"):
            Folder(store, projections_for(role, Configuration()))
    finally:
        store.close()
