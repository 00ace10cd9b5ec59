"""Impact preview over NATS: 503 with Retry-After when no planner answers; with one, the
caller's tenant only; the planner's 400s pass through; publishes nothing."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from streamproc.impact.selector import Selector
from streamproc.natsd.server import EmbeddedNats
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import BASE, Harness, default_settings, start, stop, token

URL = f"{BASE}/preview/impact"


@dataclass
class Result:
    count: int
    digests: list[str]
    unmatched: list[str]
    usage_unknown: int = 0

    def sample(self, n: int) -> list[str]:
        return self.digests[:n]


@dataclass
class FakeIndex:
    """Images per tenant; product keys match by exact string."""

    images: dict[str, dict[str, set[str]]]
    calls: list[tuple[str, Selector]] = field(default_factory=list)

    def resolve_by_purls(
        self, keys: Collection[str], *, usage_only: bool, selector: Selector
    ) -> Result:
        self.calls.append(("purls", selector))
        if any(k.startswith("!") for k in keys):
            raise ValueError("unparseable purl '!'")
        mine = self.images.get(selector.tenant, {})
        hit = sorted(d for d, ks in mine.items() if ks & set(keys))
        unmatched = [k for k in keys if not any(k in ks for ks in mine.values())]
        return Result(len(hit), hit, unmatched, usage_unknown=len(hit) // 2)

    def resolve_all(self, selector: Selector) -> Result:
        self.calls.append(("all", selector))
        mine = sorted(self.images.get(selector.tenant, {}))
        return Result(len(mine), mine, [])


INDEX = {
    "acme": {f"sha256:{i:064x}": {"pkg:deb/openssl"} for i in range(30)},
    "globex": {"sha256:" + "f" * 64: {"pkg:deb/openssl", "pkg:npm/left-pad"}},
}


async def test_without_a_planner_the_route_answers_503_with_retry_after(gw: Harness) -> None:
    seq = await gw.last_seq()
    status, problem, headers = await gw.call("POST", URL, tok=token(), json={"productKeys": ["a"]})
    assert status == 503 and headers["Retry-After"] == "5"
    assert problem["type"].endswith("planner-unavailable")
    assert "no planner answered the impact preview" in problem["detail"]
    assert headers["Content-Type"].startswith("application/problem+json")
    assert await gw.last_seq() == seq


async def test_preview_with_an_index(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> None:
    index = FakeIndex(INDEX)
    h = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path), impact=index)
    try:
        seq = await h.last_seq()
        status, res, _ = await h.call(
            "POST",
            URL,
            tok=token("acme", "scheduler.read"),
            json={
                "productKeys": ["pkg:deb/openssl", "pkg:npm/left-pad"],
                "sampleSize": 3,
                "selection": {"namespaces": ["prod"], "includeTags": ["v*"]},
            },
        )
        assert status == 200, res
        assert res["count"] == 30 and len(res["sample"]) == 3
        assert res["unmatched"] == ["pkg:npm/left-pad"] and res["unmatchedCount"] == 1
        assert res["usageUnknown"] == 15
        kind, sel = index.calls[-1]
        assert kind == "purls" and sel.tenant == "acme" and sel.namespaces == ["prod"]
        assert sel.include_tags == ["v*"]
        status, res, _ = await h.call("POST", URL, tok=token("globex"), json={})
        assert status == 200 and res["count"] == 1 and index.calls[-1][0] == "all"
        assert index.calls[-1][1].tenant == "globex"
        for body, code in [
            ({"sampleSize": 101}, 400),
            ({"productKeys": ["!x"]}, 400),
            ({"tenant": "acme"}, 400),
        ]:
            status, _, _ = await h.call("POST", URL, tok=token(), json=body)
            assert status == code, body
        assert await h.last_seq() == seq, "a preview never publishes"
    finally:
        await stop(h)
        await drop_streams(nats_server.url, prefix)
