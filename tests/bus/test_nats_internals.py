"""The nats-py internals streamproc relies on are still there, with the same shape.

``bus/fastclient.py`` replaces nats-py's parser and its request wait and calls its private
send/flush methods, and ``runtime/lease.py`` builds a ``KeyValue`` by hand. A nats-py release
may move any of it without notice: these tests fail naming the attribute that changed, instead
of a client that silently drops or queues messages."""

from __future__ import annotations

import inspect
import re
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from nats import errors
from nats.aio.client import Client
from nats.js import client as js_client
from nats.js.kv import KeyValue
from nats.nuid import NUID
from nats.protocol import parser

from streamproc.bus.connect import connect
from streamproc.bus.fastclient import NATS_PY_MINOR, FastClient, FastParser
from streamproc.natsd.server import EmbeddedNats
from tests.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]

METHODS: dict[tuple[type, str], list[str]] = {
    (Client, "_process_msg"): ["self", "sid", "subject", "reply", "data", "headers"],
    (Client, "_send_command"): ["self", "cmd", "priority"],
    (Client, "_flush_pending"): ["self", "force_flush"],
    (Client, "_request_new_style"): ["self", "subject", "payload", "timeout", "headers"],
    (Client, "_init_request_sub"): ["self"],
    (Client, "_request_sub_callback"): ["self", "msg"],
    (parser.Parser, "__init__"): ["self", "nc"],
    (parser.Parser, "parse"): ["self", "data"],
    (parser.Parser, "reset"): ["self"],
    (KeyValue, "__init__"): ["self", "name", "stream", "pre", "js", "direct"],
}
"""Private (or constructor) signatures called or overridden, by parameter names."""

CLIENT_ATTRIBUTES: dict[str, Any] = {
    "_ps": parser.Parser,
    "_max_payload": int,
    "_max_pending_size": int,
    "_pending_data_size": int,
    "_pending": list,
    "_server_info": dict,
    "_resp_map": dict,
    "_nuid": NUID,
    "stats": dict,
}
"""Attributes of a fresh ``Client`` read or replaced, with their types."""

PROPERTIES = ["is_closed", "is_draining_pubs", "is_connected", "is_reconnecting"]
ERRORS = [
    "ConnectionClosedError",
    "ConnectionDrainingError",
    "OutboundBufferLimitError",
    "BadSubjectError",
]


def test_installed_nats_py_is_the_pinned_minor() -> None:
    installed = version("nats-py")
    assert installed.startswith(NATS_PY_MINOR + "."), (
        f"nats-py {installed} is installed, but streamproc's private use of it was checked "
        f"against {NATS_PY_MINOR}.x: re-check bus/fastclient.py, then move NATS_PY_MINOR and "
        "the pin in pyproject.toml"
    )


def test_pyproject_pins_that_minor() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (nats_dep,) = [d for d in deps if re.match(r"nats-py\b", d)]
    assert re.fullmatch(rf"nats-py(\[nkeys\])?~={re.escape(NATS_PY_MINOR)}\.\d+", nats_dep), (
        f"pyproject.toml has {nats_dep!r}: pin nats-py to {NATS_PY_MINOR}.x (~={NATS_PY_MINOR}.0)"
    )


@pytest.mark.parametrize(("owner", "name"), list(METHODS), ids=lambda v: getattr(v, "__name__", v))
def test_private_signatures(owner: type, name: str) -> None:
    where = f"{owner.__module__}.{owner.__name__}.{name}"
    method = getattr(owner, name, None)
    assert method is not None, f"nats-py no longer has {where}"
    params = list(inspect.signature(method).parameters)
    assert params == METHODS[(owner, name)], f"{where} changed its parameters to {params}"


def test_client_attributes_properties_and_errors() -> None:
    client = Client()
    for name, kind in CLIENT_ATTRIBUTES.items():
        assert hasattr(client, name), f"nats-py's Client no longer sets {name} in __init__"
        value = getattr(client, name)
        assert isinstance(value, kind), f"Client.{name} is now {type(value).__name__}"
    assert {"in_msgs", "in_bytes", "out_msgs", "out_bytes"} <= set(client.stats), (
        f"Client.stats keys changed: {sorted(client.stats)}"
    )
    for name in ("_flush_queue", "_flusher_task"):  # publish_hpub_nowait queues through them
        assert hasattr(client, name), f"nats-py's Client no longer has {name}"
    for name in PROPERTIES:
        assert isinstance(getattr(Client, name, None), property), f"Client.{name} is gone"
    for name in ERRORS:
        assert issubclass(getattr(errors, name, type(None)), errors.Error), (
            f"nats.errors.{name} is gone"
        )


def test_parser_state_and_constants() -> None:
    p = parser.Parser(None)
    assert isinstance(p.buf, bytearray), "Parser.buf is no longer a bytearray"
    assert p.state == parser.AWAITING_CONTROL_LINE, "Parser starts in another state"
    assert hasattr(p, "nc"), "Parser no longer keeps its client as .nc"
    assert js_client.KV_PRE_TEMPLATE == "$KV.{bucket}.", "nats.js.client.KV_PRE_TEMPLATE changed"


async def test_the_client_reads_through_the_replaced_parser(nats_server: EmbeddedNats) -> None:
    """nats-py's read loop must feed ``_ps`` and dispatch through ``_process_msg``."""
    nc = await connect(nats_server.url)
    try:
        assert type(nc) is FastClient and type(nc._ps) is FastParser, (
            "Client.__init__/connect no longer keeps the parser FastClient installs in _ps"
        )
        got: list[bytes] = []
        sub = await nc.subscribe_raw("internals.x", lambda _s, _r, data, _h: got.append(data))
        assert isinstance(sub._id, int), "Subscription._id is no longer the sid"
        await nc.publish("internals.x", b"through the fast path")
        await eventually(lambda: got, what="a message via FastParser and _process_msg")
        assert got == [b"through the fast path"]
        assert nc.stats["in_msgs"] >= 1
    finally:
        await nc.close()
