"""What the webhook hot path counts and reads, as operators and senders see it: the
Prometheus series updated without prometheus-client's lock add up exactly as the stock ones
do, and a body is read the same whether it came in with the headers or after them."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from prometheus_client import REGISTRY as DEFAULT_REGISTRY
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from streamproc import metrics
from tests.gateway.auth.test_webhooks import FEEDSER, export, post
from tests.gateway.harness import Harness, signed_headers

BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
AMOUNTS = (0.0, 0.0004, 0.0005, 0.00050001, 0.001, 0.003, 0.015, 0.7, 1.0, 5.0, 5.1, 120.0)


def _samples(registry: CollectorRegistry) -> list[str]:
    return [
        line for line in generate_latest(registry).decode().splitlines() if "_created" not in line
    ]


def test_loop_series_scrape_exactly_as_the_stock_ones() -> None:
    stock, loop = CollectorRegistry(), CollectorRegistry()
    for registry, fast in ((stock, False), (loop, True)):
        h = Histogram("t_seconds", "t", ["route"], buckets=BOUNDS, registry=registry)
        c = Counter("t_events", "t", ["result"], registry=registry)
        g = Gauge("t_offset", "t", registry=registry)
        c.labels("accepted").inc(2)  # counted before the switch: kept
        observe = metrics.loop_histogram(h.labels("/x")) if fast else h.labels("/x").observe
        inc = metrics.loop_counter(c.labels("accepted")) if fast else c.labels("accepted").inc
        set_ = metrics.loop_gauge(g) if fast else g.set
        for amount in AMOUNTS:
            observe(amount)
            inc()
            set_(-amount)
        c.labels("accepted").inc()  # the child's own inc still counts into the same series
    assert _samples(loop) == _samples(stock)
    assert 't_seconds_bucket{le="0.0005",route="/x"} 3.0' in _samples(loop)


def _metric(name: str, **labels: str) -> float:
    return DEFAULT_REGISTRY.get_sample_value(name, labels) or 0.0


ROUTE = "/api/v1/scheduler/events/feedser-export"


def _snapshot() -> dict[str, float]:
    events = "scheduler_events_total"
    latency = "scheduler_http_request_duration_seconds_count"
    return {
        "accepted": _metric(events, source="feedser", result="accepted"),
        "duplicate": _metric(events, source="feedser", result="duplicate"),
        "refused": _metric(events, source="feedser", result="refused"),
        "stored": _metric("streamproc_published_events_total", result="stored"),
        "ticks": _metric("hlc_ticks_total"),
        "202": _metric(latency, route=ROUTE, method="POST", status="202"),
        "409": _metric(latency, route=ROUTE, method="POST", status="409"),
    }


async def test_every_webhook_is_counted_once_in_each_series(gw: Harness) -> None:
    before = _snapshot()
    body = export("counted-1")
    for delivery, want in (("c-1", 202), ("c-1", 409), ("c-2", 200), ("c-3", 202)):
        sent = body if delivery != "c-3" else export("counted-3")
        status, res, _ = await post(gw, FEEDSER, sent, delivery=delivery)
        assert status == want, res
    after = _snapshot()
    delta = {k: after[k] - before[k] for k in before}
    # Two recorded exports, each for the token's tenant, plus three claimed deliveries (c-1,
    # c-2, c-3; the replay of c-1 claimed nothing) — every one acknowledged as stored.
    exact = ("accepted", "duplicate", "refused", "202", "409")
    assert {k: delta[k] for k in exact} == {
        "accepted": 2,
        "duplicate": 1,
        "refused": 1,
        "202": 2,
        "409": 1,
    }
    # Other work of the process may publish and stamp too: at least these.
    assert delta["stored"] >= 2 + 3 and delta["ticks"] >= 2
    buckets = sum(
        s.value
        for m in DEFAULT_REGISTRY.collect()
        if m.name == "scheduler_http_request_duration_seconds"
        for s in m.samples
        if s.name.endswith("_bucket")
        and s.labels.get("le") == "+Inf"
        and s.labels.get("route") == ROUTE
        and s.labels.get("status") == "202"
    )
    assert buckets == after["202"], "the +Inf bucket holds every observation"


async def _raw_post(
    url: str, path: str, headers: dict[str, str], body: bytes, split: bool
) -> bytes:
    """POST over a plain socket; ``split``: the body follows the headers in a second write,
    once the server has had the headers alone."""
    u = urlsplit(url)
    reader, writer = await asyncio.open_connection(u.hostname, u.port)
    head = [f"POST {path} HTTP/1.1", f"Host: {u.hostname}", f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    head_bytes = ("\r\n".join(head) + "\r\n\r\n").encode()
    try:
        if split:
            writer.write(head_bytes + body[:10])
            await writer.drain()
            await asyncio.sleep(0.05)  # the server parses the headers and waits for the rest
            writer.write(body[10:])
        else:
            writer.write(head_bytes + body)
        await writer.drain()
        status_line = await reader.readline()
        return status_line
    finally:
        writer.close()
        await writer.wait_closed()


async def test_a_body_is_read_whole_whether_it_came_with_the_headers_or_after(
    gw: Harness,
) -> None:
    for name, split in (("together", False), ("after", True)):
        body = export(f"raw-{name}")
        seq = await gw.last_seq()
        status = await _raw_post(gw.url, FEEDSER, signed_headers(body), body, split)
        assert status.startswith(b"HTTP/1.1 202"), (name, status)
        assert await gw.last_seq() == seq + 1, "recorded for the token's tenant"
