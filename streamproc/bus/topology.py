"""What the connected server says of its cluster: how many servers it has, read from the
server's INFO (no JetStream API request)."""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client


def cluster_size(nc: Client) -> int:
    """How many servers the connected server's cluster advertises (1 when not clustered).

    The server's INFO names its cluster and lists the client URLs of the cluster's servers
    (``connect_urls``, itself included), again whenever a route forms; a ``FastClient``
    keeps the latest list, and servers announced later that were not in the pool join it
    as discovered. With ``no_advertise`` the list is absent and this answers 1 — set
    ``STREAMPROC_STREAM_REPLICAS`` explicitly there.
    """
    info: dict[str, Any] = getattr(nc, "_server_info", None) or {}
    if not info.get("cluster"):
        return 1
    announced = getattr(nc, "announced_urls", None)  # FastClient: the latest INFO's
    urls = set(info.get("connect_urls") or [] if announced is None else announced)
    urls |= {s.uri.netloc for s in getattr(nc, "_server_pool", []) if getattr(s, "discovered", 0)}
    return max(1, len(urls))
