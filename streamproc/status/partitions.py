"""Who holds which planner partition (``planner.partitions`` > 1), as the lease bucket says:
one key ``planner-p<k>-of-<N>`` per partition held, its value the holder
(``<node>/<pid>/<random>``). A partition nobody holds has no key (its lease expired or was
released), so it is listed as unheld."""

from __future__ import annotations

import re

from streamproc.bus.fastclient import FastClient
from streamproc.runtime.lease import entries

_KEY = re.compile(r"planner-p(\d+)-of-(\d+)")


async def partition_owners(nc: FastClient, prefix: str) -> dict[tuple[int, int], str]:
    """``(k, N)`` → holder of every planner partition lease held now."""
    out: dict[tuple[int, int], str] = {}
    for key, value in (await entries(nc, prefix)).items():
        m = _KEY.fullmatch(key)
        if m and value:
            out[(int(m[1]), int(m[2]))] = value.decode(errors="replace")
    return out


def render(owners: dict[tuple[int, int], str], partitions: int) -> list[str]:
    """One line per partition of ``partitions`` (those of another N held still, too)."""
    lines = []
    keys = sorted(set(owners) | {(k, partitions) for k in range(partitions)})
    for k, n in keys:
        holder = owners.get((k, n))
        lines.append(f"planner partition {k}/{n}: {'held by ' + holder if holder else 'unheld'}")
    return lines
