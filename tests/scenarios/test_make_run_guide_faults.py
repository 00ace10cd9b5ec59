"""The faults switch of the guide `make run` prints, as a newcomer runs it before step 4: the
throttling it turns on is absorbed by the runner's retries (no image fails), and its "off"
command switches it off."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import msgspec
import pytest

from streamproc.configfile.registry import BY_PATH
from streamproc.natsd.server import EmbeddedNats
from streamproc.scanner import demo
from streamproc.scanner.demo import Demo
from streamproc.scanner.faults import FaultConfig
from tests.flows import EXPECTED_DELTAS, feedser_run
from tests.scanner.test_demo_data import _Settings

FAULTS = re.compile(r"curl -s -X POST (\S+)/admin/faults -d '(.*)'$")


def guide_fault_bodies(scanner: str) -> list[str]:
    guide = demo.render_guide("http://gw", scanner, Path("run/osv"), "demo", _Settings())
    found = [FAULTS.search(line) for line in guide.splitlines()]
    return [m.group(2) for m in found if m is not None and m.group(1) == scanner]


def test_the_guides_throttling_fits_in_one_calls_attempts() -> None:
    """Were every throttled answer to land on one image's call (a run of one image, the next
    one a newcomer starts), that call's attempts still outlast them: nothing fails."""
    on, off = guide_fault_bodies("http://sc")
    throttled = msgspec.json.decode(on, type=FaultConfig).next_429
    assert 0 < throttled < BY_PATH["runner.call_attempts"].default  # type: ignore[operator]
    assert msgspec.json.decode(off, type=FaultConfig) == FaultConfig()


async def test_the_guides_throttling_is_retried_to_verdicts_and_switched_off(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    switched: dict[str, object] = {}

    async def throttle_as_the_guide_says(d: Demo) -> None:
        on, off = guide_fault_bodies(d.scanner_url)
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{d.scanner_url}/admin/faults", data=on) as r:
                assert r.status == 200
                switched["on"] = (await r.json())["config"]
            switched["off"] = off

    async with feedser_run(
        nats_server, prefix, tmp_path, monkeypatch, throttle_as_the_guide_says
    ) as flow:
        assert switched["on"]["next429"] > 0  # type: ignore[index]
        summary = next(m for m in flow.notify if str(m["subject"]).endswith(".run.summary"))
        data = summary["data"]
        assert data["state"] == "completed", data  # type: ignore[index]
        deltas = [m for m in flow.notify if str(m["subject"]).endswith(".rescan.delta")]
        assert len(deltas) == EXPECTED_DELTAS
        url = flow.demo.scanner_url
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{url}/admin/stats") as r:
                assert (await r.json())["faults"]["429"] == switched["on"]["next429"]  # type: ignore[index]
            async with s.post(f"{url}/admin/faults", data=str(switched["off"])) as r:
                config = (await r.json())["config"]
        assert config["next429"] == 0 and config["retryAfterS"] is None
