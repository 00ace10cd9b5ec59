"""The pipelined publisher against a real nats-server."""

from __future__ import annotations

import pytest

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient, PayloadTooLarge
from streamproc.bus.publisher import NoStream, Publisher, WrongExpectedSequence
from tests.samples import sample_event


async def test_pipelined_publish_returns_contiguous_sequences(
    publisher: Publisher, stream_names: tuple[str, str, str]
) -> None:
    acks = await publisher.publish_events([sample_event(i) for i in range(5000)])
    assert [a.seq for a in acks] == list(range(1, 5001))
    assert all(a.stream == stream_names[0] and not a.duplicate for a in acks)


async def test_retry_with_same_id_is_deduplicated(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str]
) -> None:
    events = [sample_event(i) for i in range(100)]
    await publisher.publish_events(events)
    again = await publisher.publish_events(events)
    assert all(a.duplicate for a in again)
    assert [a.seq for a in again] == list(range(1, 101))
    info = await jsapi.stream_info(nc, stream_names[0])
    assert info is not None and info.state.messages == 100


async def test_expected_last_subject_sequence_guards_an_aggregate(
    publisher: Publisher, stream_names: tuple[str, str, str]
) -> None:
    subject = f"{publisher.prefix}.events.acme.schedule.s1"
    first = await publisher.publish(subject, b"{}", "a", expected_last_subject_seq=0)
    with pytest.raises(WrongExpectedSequence) as err:
        await publisher.publish(subject, b"{}", "b", expected_last_subject_seq=0)
    assert err.value.err_code == 10071
    second = await publisher.publish(subject, b"{}", "c", expected_last_subject_seq=first.seq)
    assert second.seq == first.seq + 1


async def test_per_message_errors_surface_without_losing_the_others(
    publisher: Publisher, stream_names: tuple[str, str, str]
) -> None:
    subject = f"{publisher.prefix}.events.acme.schedule.s2"
    await publisher.publish(subject, b"{}", "x0", expected_last_subject_seq=0)
    items = [(f"{publisher.prefix}.events.acme.run.r{i}", b"{}", f"ok-{i}") for i in range(50)]
    outcomes = await publisher.publish_many_settled(items)
    assert all(not isinstance(o, BaseException) for o in outcomes)
    # a refused message in a pipelined burst fails alone
    bad = await publisher.publish_many_settled(
        [*items[:3], (subject, b"{}", "x1")]  # duplicate ids for the first three
    )
    assert [getattr(o, "duplicate", None) for o in bad[:3]] == [True, True, True]


async def test_no_stream_for_subject_is_a_clear_error(nc: FastClient) -> None:
    pub = await Publisher(nc, prefix="nowhere", attempts=2, timeout=1.0).start()
    try:
        with pytest.raises(NoStream, match="no stream answered"):
            await pub.publish("nowhere.events.acme.x.y", b"{}", "id-1")
    finally:
        await pub.close()


async def test_oversized_message_is_refused(
    publisher: Publisher, stream_names: tuple[str, str, str]
) -> None:
    with pytest.raises(PayloadTooLarge, match="exceeds the server's max_payload"):
        await publisher.publish(
            f"{publisher.prefix}.events.acme.image.x", b"x" * (9 * 1024 * 1024), "big"
        )
    # the connection survives and the next publish goes through
    ack = await publisher.publish(f"{publisher.prefix}.events.acme.image.y", b"{}", "small")
    assert ack.seq == 1
