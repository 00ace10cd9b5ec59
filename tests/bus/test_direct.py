"""Batched direct get against the real nats-server: pages, what is left, the last message of
a subject, and errors that must never read as "no more messages"."""

from __future__ import annotations

import contextlib

import pytest

from streamproc.bus import direct, jsapi
from streamproc.bus.fastclient import FastClient


@pytest.fixture
async def stream(nc: FastClient, prefix: str) -> str:
    name = f"{prefix.upper()}_DIRECT"
    config = {"name": name, "subjects": [f"{prefix}.d.>"], "storage": "file", "allow_direct": True}
    await jsapi.request(nc, f"STREAM.CREATE.{name}", config)
    js = nc.jetstream()
    for i in range(10):
        subject = f"{prefix}.d.{'a' if i % 2 == 0 else 'b'}"
        await js.publish(subject, f"m{i}".encode(), headers={"Nats-Msg-Id": f"id{i}"})
    yield name
    with contextlib.suppress(jsapi.JsApiError):
        await jsapi.request(nc, f"STREAM.DELETE.{name}")


async def test_pages_of_one_subject_with_what_is_left(
    nc: FastClient, prefix: str, stream: str
) -> None:
    got = await direct.after(nc, stream, f"{prefix}.d.a", 0, 3)
    assert [m.seq for m in got.messages] == [1, 3, 5] and got.pending == 2
    assert [m.data for m in got.messages] == [b"m0", b"m2", b"m4"]
    assert got.messages[0].headers["Nats-Msg-Id"] == "id0" and got.messages[0].time
    rest = await direct.after(nc, stream, f"{prefix}.d.a", 5, 3)
    assert [m.seq for m in rest.messages] == [7, 9] and rest.pending == 0
    none = await direct.after(nc, stream, f"{prefix}.d.a", 9, 3)
    assert none.messages == [] and none.pending == 0
    last = await direct.last_of(nc, stream, f"{prefix}.d.b")
    assert [m.seq for m in last.messages] == [10] and last.upto == 10
    assert (await direct.last_of(nc, stream, f"{prefix}.d.zzz")).messages == []
    every = await direct.scan(nc, stream, f"{prefix}.d.b", page=2)
    assert [m.seq for m in every] == [2, 4, 6, 8, 10]


async def test_a_stream_without_direct_responders_is_an_error_not_an_empty_page(
    nc: FastClient, prefix: str, stream: str
) -> None:
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    await jsapi.request(nc, f"STREAM.UPDATE.{stream}", {**info.config, "allow_direct": False})
    with pytest.raises(jsapi.JsApiError) as err:
        await direct.after(nc, stream, f"{prefix}.d.a", 0, 3, timeout=2)
    assert err.value.code == 503
    with pytest.raises(jsapi.JsApiError) as err:
        await direct.after(nc, "NO_SUCH_STREAM", f"{prefix}.d.a", 0, 3, timeout=2)
    assert err.value.code == 503
    with pytest.raises(ValueError, match="batch"):
        await direct.get_batch(nc, stream, {"seq": 1})
