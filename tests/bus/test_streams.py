"""`streams apply` against a real server: idempotent, updates in place, reports drift."""

from __future__ import annotations

import pytest

from streamproc.bus import jsapi, streams
from streamproc.bus.fastclient import FastClient
from streamproc.names import NOTIFY_WINDOW


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
        assert updated.changed["max_age"] == (3600 * 10**9, 7 * 24 * 3600 * 10**9)
        drifted = dict(defs[2], retention="workqueue")
        (result,) = await streams.apply(nc, [drifted])
        assert result.action == "drift"
        assert result.drift == {"retention": ("interest", "workqueue")}
        info = await jsapi.stream_info(nc, defs[2]["name"])
        assert info is not None and info.config["retention"] == "interest"
    finally:
        await jsapi.request(nc, f"STREAM.DELETE.{defs[2]['name']}")


async def test_an_older_notify_stream_switches_to_interest_in_place_keeping_its_messages(
    nc: FastClient, prefix: str
) -> None:
    """A deployment of an earlier version has the Notify stream with limits retention and
    24 h max age: `streams apply` adds the window consumer first, then switches it in place
    (no drift, nothing dropped) and raises its max age to the hold's limit."""
    new = streams.definitions(prefix)[2]
    old = dict(new, retention="limits", max_age=24 * 3600 * 10**9)
    old["duplicate_window"] = 3600 * 10**9
    name = new["name"]
    await jsapi.request(nc, f"STREAM.CREATE.{name}", old)
    try:
        js = nc.jetstream()
        for i in range(3):
            await js.publish(
                f"{prefix}.notify.acme.rescan.delta", b"{}", headers={"Nats-Msg-Id": str(i)}
            )
        (result,) = await streams.apply(nc, [new])
        assert result.action == "updated" and not result.drift
        assert result.changed["retention"] == ("limits", "interest")
        assert result.changed["max_age"] == (24 * 3600 * 10**9, 7 * 24 * 3600 * 10**9)
        info = await jsapi.stream_info(nc, name)
        assert info is not None and info.config["retention"] == "interest"
        assert info.state.messages == 3, "the window consumer holds what was there"
        window = await jsapi.request(nc, f"CONSUMER.INFO.{name}.{NOTIFY_WINDOW}")
        assert window["ack_floor"]["stream_seq"] == 0
        # A window consumer someone deleted is made again by the next apply.
        await jsapi.request(nc, f"CONSUMER.DELETE.{name}.{NOTIFY_WINDOW}")
        (again,) = await streams.apply(nc, [new])
        assert again.action == "unchanged"
        await jsapi.request(nc, f"CONSUMER.INFO.{name}.{NOTIFY_WINDOW}")
    finally:
        await jsapi.request(nc, f"STREAM.DELETE.{name}")


async def test_a_new_notify_stream_never_meets_a_publish_without_its_window(
    nc: FastClient, prefix: str
) -> None:
    new = streams.definitions(prefix)[2]
    try:
        (created,) = await streams.apply(nc, [new])
        assert created.action == "created"
        await nc.jetstream().publish(f"{prefix}.notify.acme.rescan.delta", b"{}")
        info = await jsapi.stream_info(nc, new["name"])
        assert info is not None and info.config["retention"] == "interest"
        assert info.state.messages == 1, "kept: the window holds it"
    finally:
        await jsapi.request(nc, f"STREAM.DELETE.{new['name']}")


async def test_a_process_that_found_no_stream_meets_one_another_made_and_switched(
    nc: FastClient, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Roles apply the streams as they start. One looked and found no Notify stream; another
    then made it (as limits) and switched it to interest; the first one's create (as limits)
    now meets a stream of another configuration: it updates it instead of failing."""
    defs = streams.definitions(prefix)[:3]
    await streams.apply(nc, defs)  # the other process, done
    real = jsapi.stream_info
    looked: list[str] = []

    async def stale(client: object, name: str) -> jsapi.StreamInfo | None:
        if name not in looked:  # what the late process saw before the other made it
            looked.append(name)
            return None
        return await real(client, name)  # type: ignore[arg-type]

    monkeypatch.setattr(jsapi, "stream_info", stale)
    try:
        results = await streams.apply(nc, defs)
        # The same create again is idempotent for the other two; the Notify stream is updated.
        assert [r.action for r in results] == ["created", "created", "unchanged"]
    finally:
        monkeypatch.undo()
        for d in defs:
            await jsapi.request(nc, f"STREAM.DELETE.{d['name']}")
