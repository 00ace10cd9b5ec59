"""`streams apply` against a real server: idempotent, updates in place, reports drift."""

from __future__ import annotations

from streamproc.bus import jsapi, streams
from streamproc.bus.fastclient import FastClient


async def test_apply_creates_then_is_idempotent(nc: FastClient, prefix: str) -> None:
    defs = streams.definitions(prefix)
    try:
        first = await streams.apply(nc, defs)
        assert [r.action for r in first] == ["created"] * 4  # three streams, the SBOM store
        second = await streams.apply(nc, defs)
        assert [r.action for r in second] == ["unchanged"] * 4
        info = await jsapi.stream_info(nc, defs[0]["name"])
        assert info is not None
        assert info.config["duplicate_window"] == 3600 * 10**9
        assert info.config["deny_delete"] is True
    finally:
        for d in defs:
            await jsapi.request(nc, f"STREAM.DELETE.{d['name']}")


async def test_apply_updates_what_it_can_and_reports_drift(nc: FastClient, prefix: str) -> None:
    defs = streams.definitions(prefix)
    notify = dict(defs[2])
    notify["max_age"] = 3600 * 10**9
    await streams.apply(nc, [notify])
    try:
        (updated,) = await streams.apply(nc, [defs[2]])
        assert updated.action == "updated"
        assert updated.changed["max_age"] == (3600 * 10**9, 24 * 3600 * 10**9)
        drifted = dict(defs[2], retention="interest")
        (result,) = await streams.apply(nc, [drifted])
        assert result.action == "drift"
        assert result.drift == {"retention": ("limits", "interest")}
        info = await jsapi.stream_info(nc, defs[2]["name"])
        assert info is not None and info.config["retention"] == "limits"
    finally:
        await jsapi.request(nc, f"STREAM.DELETE.{defs[2]['name']}")
