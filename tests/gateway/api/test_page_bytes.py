"""Every list is bounded by bytes as well as by items: a page ends before the item that would
take it past ``PAGE_BYTES``, and ``nextCursor`` goes on from there — whatever the records
hold, no list response grows past the bound (a single item larger than it still comes, alone,
so paging always moves)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from streamproc.gateway.api.query import PAGE_BYTES, page_body
from streamproc.readmodel.keys import encode_cursor
from streamproc.readmodel.queries import Page
from tests.gateway.api.test_images import body, digest, put
from tests.gateway.harness import BASE, Harness, token

BIG = 100_000
"""Bytes of each item below: three never fit one page, two do."""


def _page(sizes: list[int], more: bool) -> Page[int]:
    keys = [b"t\x00" + bytes([i]) for i in range(len(sizes))]
    nxt = encode_cursor(b"t\x00", keys[-1]) if more else None
    return Page(sizes, nxt, b"t\x00", keys)


@pytest.mark.parametrize(
    ("sizes", "more", "kept"),
    [
        ([10, 10, 10], False, 3),
        ([126_000, 126_000, 5_000], False, 2),
        ([120_000, 140_000, 10], True, 1),
        ([300_000, 10], False, 1),  # larger than the bound alone: still one item
    ],
)
def test_a_page_ends_before_the_item_that_would_pass_the_bound(
    sizes: list[int], more: bool, kept: int
) -> None:
    page = _page(sizes, more)
    raw = page_body(page, lambda n: "x" * n)
    doc = msgspec.json.decode(raw)
    assert [len(x) for x in doc["items"]] == sizes[:kept]
    if kept < len(sizes):
        assert doc["nextCursor"] == page.cursor_after(kept - 1)
        assert len(raw) <= PAGE_BYTES or kept == 1
    else:
        assert doc["nextCursor"] == page.next_cursor
    if sizes[0] <= PAGE_BYTES:
        assert len(raw) <= PAGE_BYTES


async def all_pages(gw: Harness, path: str) -> tuple[list[Any], list[int]]:
    items: list[Any] = []
    sizes: list[int] = []
    url: str | None = path
    while url:
        status, raw, _ = await gw.call("GET", url, tok=token(scopes="scheduler.read"))
        assert status == 200
        sizes.append(len(msgspec.json.encode(raw)))
        items += raw["items"]
        url = f"{path}&cursor={raw['nextCursor']}" if raw["nextCursor"] else None
    return items, sizes


def fat(n: int) -> list[str]:
    """``n`` bytes or so of namespaces (a selection may name many)."""
    return [f"ns-{i:04d}-" + "x" * 490 for i in range(n // 500)]


async def test_schedules_runs_and_images_pages_stay_within_the_bound(gw: Harness) -> None:
    for i in range(3):
        sel = {"scope": "by-namespace", "namespaces": fat(BIG)}
        status, _, _ = await gw.call(
            "POST",
            f"{BASE}/schedules?wait=true",
            tok=token(),
            json={"id": f"s{i}", "name": "n", "whenCron": "0 2 * * *", "timezone": "UTC",
                  "selection": sel},
        )  # fmt: skip
        assert status == 201
        status, _, _ = await gw.call(
            "POST", f"{BASE}/run?wait=true", tok=token(), json={"selection": sel}
        )
        assert status == 201
        tags = [f"t{j:05d}-" + "y" * 490 for j in range(BIG // 500)]
        status, _, _ = await put(gw, digest(i), body(tags=tags), query="?wait=true")
        assert status == 200
    for path in (f"{BASE}/schedules?limit=50", f"{BASE}/runs?limit=50", f"{BASE}/images?limit=50"):
        items, sizes = await all_pages(gw, path)
        assert len(items) == 3, path
        assert len(sizes) == 2 and max(sizes) <= PAGE_BYTES, (path, sizes)
