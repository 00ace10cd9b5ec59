"""What the connected server says of its cluster: how many servers it has, read from the
server's INFO (no JetStream API request)."""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client


def cluster_size(nc: Client) -> int:
    """How many servers the connected server's cluster advertises (1 when not clustered).

    The server's INFO names its cluster and lists the client URLs of the cluster's servers
    (``connect_urls``, itself included); servers announced later join the client's pool as
    discovered. With ``no_advertise`` the list is absent and this answers 1 — set
    ``STREAMPROC_STREAM_REPLICAS`` explicitly there.
    """
    info: dict[str, Any] = getattr(nc, "_server_info", None) or {}
    if not info.get("cluster"):
        return 1
    urls = set(info.get("connect_urls") or [])
    urls |= {s.uri.netloc for s in getattr(nc, "_server_pool", []) if getattr(s, "discovered", 0)}
    return max(1, len(urls))
