"""Event-log retention: settings, the stream config they produce, and a real server keeping
the log within its byte limit by discarding the oldest events (publishes keep succeeding)."""

from __future__ import annotations

import contextlib

import pytest

from streamproc.bus import jsapi, streams
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.bus.streams import (
    DAY,
    MAX_MSG_SIZE,
    EventsRetention,
    configured_events_retention,
    definitions,
)
from streamproc.config import ConfigError
from streamproc.configfile.loader import environ

MIB = 1024 * 1024


def test_defaults_keep_the_log_forever_and_refuse_rather_than_drop() -> None:
    events = definitions("scheduler", 1)[0]
    assert (events["max_age"], events["max_bytes"], events["discard"]) == (0, -1, "new")
    assert definitions("scheduler", 1, EventsRetention()) == definitions("scheduler", 1)


def test_limits_apply_to_the_event_log_only() -> None:
    plain = definitions("scheduler", 1)
    limited = definitions("scheduler", 1, EventsRetention(max_age_days=400, max_bytes=50 * MIB))
    events = limited[0]
    assert (events["max_age"], events["max_bytes"], events["discard"]) == (
        400 * DAY,
        50 * MIB,
        "old",
    )
    assert limited[1:] == plain[1:], "work and notify streams keep their own policies"
    age_only = definitions("scheduler", 1, EventsRetention(max_age_days=30))[0]
    assert (age_only["max_bytes"], age_only["discard"]) == (-1, "new")


@pytest.mark.parametrize(
    ("age", "size", "want"),
    [
        (None, None, EventsRetention()),
        ("0", "0", EventsRetention()),
        (" 365 ", None, EventsRetention(max_age_days=365)),
        (None, str(10 * 1024 * MIB), EventsRetention(max_bytes=10 * 1024 * MIB)),
    ],
)
def test_settings_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, age: str | None, size: str | None, want: EventsRetention
) -> None:
    for var, value in (
        ("STREAMPROC_EVENTS_MAX_AGE_DAYS", age),
        ("STREAMPROC_EVENTS_MAX_BYTES", size),
    ):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    assert configured_events_retention(environ()) == want


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("STREAMPROC_EVENTS_MAX_AGE_DAYS", "-1"),
        ("STREAMPROC_EVENTS_MAX_AGE_DAYS", "30d"),
        ("STREAMPROC_EVENTS_MAX_AGE_DAYS", "99999"),
        ("STREAMPROC_EVENTS_MAX_BYTES", "10GB"),
        ("STREAMPROC_EVENTS_MAX_BYTES", str(MAX_MSG_SIZE - 1)),
    ],
)
def test_bad_settings_are_refused_with_the_variable_named(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=var):
        configured_events_retention(environ())


async def test_a_byte_limit_discards_the_oldest_events_and_publishes_go_on(
    nc: FastClient, prefix: str
) -> None:
    name = streams.stream_names(prefix)[0]
    try:
        (created,) = await streams.apply(nc, definitions(prefix, 1)[:1])
        assert created.action == "created"
        limited = definitions(prefix, 1, EventsRetention(max_age_days=1, max_bytes=MAX_MSG_SIZE))
        (updated,) = await streams.apply(nc, limited[:1])
        assert updated.action == "updated"
        assert updated.changed["discard"] == ("new", "old")
        assert updated.changed["max_bytes"] == (-1, MAX_MSG_SIZE)
        assert updated.changed["max_age"] == (0, DAY)
        async with Publisher(nc, prefix=prefix) as pub:
            blob = b"x" * (512 * 1024)
            acks = await pub.publish_many(
                (f"{prefix}.events.t1.blob.{i}", blob, f"blob-{i}") for i in range(24)
            )
        assert [a.seq for a in acks] == list(range(1, 25)), "no publish was refused"
        info = await jsapi.stream_info(nc, name)
        assert info is not None
        assert info.state.first_seq > 1 and info.state.last_seq == 24
        assert info.state.bytes <= MAX_MSG_SIZE
    finally:
        with contextlib.suppress(jsapi.JsApiError):
            await jsapi.request(nc, f"STREAM.DELETE.{name}")
