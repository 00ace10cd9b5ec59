"""Partitioned planners (``planner.partitions`` > 1) as ``streamproc planner`` processes, and
a catalog of tenants spread evenly over the partitions — for the tests and
``bench/planner.py --partitioned``."""

from __future__ import annotations

from pathlib import Path

from streamproc.bus.fastclient import FastClient
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, new_event
from streamproc.hlc import wall_ms
from streamproc.ids import partition_of
from streamproc.natsd.server import free_port
from streamproc.status.partitions import partition_owners
from tests.cluster.processes import RoleProcess, clean_env
from tests.planner.util import digest, lib


def spread_tenants(count: int, partitions: int) -> list[str]:
    """``count`` tenant names, the same number in every partition (NATS's mapping)."""
    per = count // partitions
    taken: dict[int, list[str]] = {k: [] for k in range(partitions)}
    i = 0
    while sum(len(v) for v in taken.values()) < per * partitions:
        name = f"tenant{i}"
        k = partition_of(name, partitions)
        if len(taken[k]) < per:
            taken[k].append(name)
        i += 1
    return sorted(t for v in taken.values() for t in v)


def stamp() -> str:
    return f"{wall_ms()}:0:seed"


def catalog(tenant: str, images: int, keys: int = 50, per_image: int = 1) -> list[Envelope]:
    """A schedule subscribed to Feedser and ``images`` images; image n uses lib(n % keys)
    and ``per_image - 1`` more of the ``keys`` libraries."""
    out = [
        new_event(
            "schedule.created",
            tenant,
            p.ScheduleCreated(
                schedule_id="s1",
                name="nightly",
                cron="0 2 * * *",
                timezone="UTC",
                subscriptions=["feedser"],
            ),
            stamp(),
        )
    ]
    for n in range(images):
        libs = sorted({lib((n + 7 * j) % keys) for j in range(per_image)})
        comps = [p.Component(purl=f"{k}@1.{n % 3}", product_key=k, used=True) for k in libs]
        payload = p.ImageIndexed(
            digest=digest(tenant, n),
            registry="registry.local",
            repository=f"app{n % 5}",
            components=comps,
            usage_known=True,
        )
        out.append(new_event("image.indexed", tenant, payload, stamp()))
    return out


def export(tenant: str, export_id: str, keys: int = 50) -> Envelope:
    changed = [lib(k) for k in range(keys)]
    return new_event(
        "export.feedser",
        tenant,
        p.FeedserExport(export_id=export_id, changed_product_keys=changed),
        stamp(),
    )


def planner_env(partitions: int, ttl_s: float, **extra: str) -> dict[str, str]:
    return clean_env(
        STREAMPROC_PLANNER_PARTITIONS=str(partitions),
        STREAMPROC_LEASE_TTL_S=str(ttl_s),
        STREAMPROC_PLANNER_DEBOUNCE_S="0",
        **extra,
    )


def planner(name: str, url: str, prefix: str, tmp: Path, env: dict[str, str]) -> RoleProcess:
    """A ``streamproc planner`` process with its own data directory and node id."""
    args = ["planner", "--nats-url", url, "--prefix", prefix, "--data-dir", str(tmp / name),
            "--node-id", name, "--http-port", str(free_port())]  # fmt: skip
    return RoleProcess(name, args, env, tmp / "logs" / f"{name}.log")


async def holders(nc: FastClient, prefix: str, partitions: int) -> dict[int, str]:
    """Partition → the node id of its holder, for the partitions held now."""
    owners = await partition_owners(nc, prefix)
    return {k: h.split("/")[0] for (k, n), h in owners.items() if n == partitions}
