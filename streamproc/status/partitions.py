"""Who holds which planner partition (``planner.partitions`` > 1), as the lease bucket says:
one key ``planner-p<k>-of-<N>`` per partition held, its value the holder
(``<node>/<pid>/<random>``). A partition nobody holds has no key (its lease expired or was
released), so it is listed as unheld."""

from __future__ import annotations

import contextlib
import re

from nats.js.errors import BucketNotFoundError

from streamproc.bus.fastclient import FastClient
from streamproc.names import lease_bucket

_KEY = re.compile(r"planner-p(\d+)-of-(\d+)")


async def partition_owners(nc: FastClient, prefix: str) -> dict[tuple[int, int], str]:
    """``(k, N)`` → holder of every planner partition lease held now."""
    try:
        kv = await nc.jetstream().key_value(lease_bucket(prefix))
    except BucketNotFoundError:
        return {}
    watcher = await kv.watchall(ignore_deletes=True)
    out: dict[tuple[int, int], str] = {}
    try:
        async for entry in watcher:
            if entry is None:  # the initial values are all delivered
                break
            m = _KEY.fullmatch(entry.key)
            if m and entry.value:
                with contextlib.suppress(UnicodeDecodeError):
                    out[(int(m[1]), int(m[2]))] = entry.value.decode()
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves it unannotated
    return out


def render(owners: dict[tuple[int, int], str], partitions: int) -> list[str]:
    """One line per partition of ``partitions`` (those of another N held still, too)."""
    lines = []
    keys = sorted(set(owners) | {(k, partitions) for k in range(partitions)})
    for k, n in keys:
        holder = owners.get((k, n))
        lines.append(f"planner partition {k}/{n}: {'held by ' + holder if holder else 'unheld'}")
    return lines
