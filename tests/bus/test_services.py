"""Queries as NATS micro services against a real server: a queue group of instances, $SRV
discovery, errors answered by the service, no instance, a deadline, slow questions not
holding up quick ones."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from streamproc.bus import services
from streamproc.bus.fastclient import FastClient
from streamproc.bus.services import ServiceFailure, ServiceUnavailable


async def discover(nc: FastClient, verb: str, name: str, wait: float = 0.5) -> list[dict]:
    """Every instance's answer to ``$SRV.<verb>.<name>`` within ``wait`` seconds."""
    inbox = nc.new_inbox()
    answers: list[dict] = []

    async def collect(msg: object) -> None:
        answers.append(json.loads(msg.data))  # type: ignore[attr-defined]

    sub = await nc.subscribe(inbox, cb=collect)
    await nc.publish(f"$SRV.{verb}.{name}", b"", reply=inbox)
    await asyncio.sleep(wait)
    await sub.unsubscribe()
    return answers


async def test_instances_share_a_queue_group_and_show_up_in_discovery(
    nc: FastClient, prefix: str
) -> None:
    seen: list[str] = []

    def echo(who: str) -> services.Handler:
        async def handle(data: bytes) -> bytes:
            seen.append(who)
            return who.encode() + b":" + data

        return handle

    a = await services.serve(nc, prefix, "echo", {"say": echo("a")}, description="test")
    b = await services.serve(nc, prefix, "echo", {"say": echo("b")}, description="test")
    subject = services.subject(prefix, "echo", "say")
    try:
        answers = [await services.call(nc, subject, b"%d" % i, 2) for i in range(40)]
        assert len(seen) == 40, "every question answered exactly once"
        assert {s.split(b":")[1] for s in answers} == {b"%d" % i for i in range(40)}
        assert set(seen) == {"a", "b"}, "both instances of the group answered"
        name = services.service_name(prefix, "echo")
        pings = await discover(nc, "PING", name)
        assert sorted(p["id"] for p in pings) == sorted([a.service.id, b.service.id])
        infos = await discover(nc, "INFO", name)
        assert {i["version"] for i in infos} == {services.VERSION}
        (endpoint,) = infos[0]["endpoints"]
        assert endpoint["subject"] == subject and endpoint["queue_group"] == name
        await a.stop()  # one leaves: the other answers everything
        assert (await services.call(nc, subject, b"x", 2)).startswith(b"b:")
    finally:
        await a.stop()
        await b.stop()


async def test_errors_answered_by_the_service_and_nobody_answering(
    nc: FastClient, prefix: str
) -> None:
    async def refuse(data: bytes) -> bytes:
        if data == b"bug":
            raise RuntimeError("boom")
        raise ServiceFailure(404, "not-found", "no such thing", field="$.id")

    async def slow(data: bytes) -> bytes:
        await asyncio.sleep(float(data))
        return b"late"

    subject = services.subject(prefix, "err", "ask")
    began = time.monotonic()
    with pytest.raises(ServiceUnavailable, match="no instance runs"):
        await services.call(nc, subject, b"", 5)
    assert time.monotonic() - began < 1, "no responders is answered at once, not at the deadline"
    svc = await services.serve(nc, prefix, "err", {"ask": refuse, "slow": slow}, description="test")
    try:
        with pytest.raises(ServiceFailure) as failure:
            await services.call(nc, subject, b"", 2)
        assert (failure.value.status, failure.value.slug) == (404, "not-found")
        assert failure.value.detail == "no such thing" and failure.value.field == "$.id"
        with pytest.raises(ServiceFailure) as bug:
            await services.call(nc, subject, b"bug", 2)
        assert bug.value.status == 500 and "boom" not in bug.value.detail, "logged, not sent"
        slow_subject = services.subject(prefix, "err", "slow")
        with pytest.raises(ServiceUnavailable, match=r"within 0\.2 s"):
            await services.call(nc, slow_subject, b"1", 0.2)
        # A long question does not hold up a short one on the same instance.
        long = asyncio.create_task(services.call(nc, slow_subject, b"1.5", 5))
        await asyncio.sleep(0.1)
        began = time.monotonic()
        assert await services.call(nc, slow_subject, b"0", 5) == b"late"
        assert time.monotonic() - began < 1.0
        assert await long == b"late"
    finally:
        await svc.stop()
