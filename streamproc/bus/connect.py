"""Connecting to NATS, with the server-version floor the design depends on."""

from __future__ import annotations

from streamproc.bus.fastclient import FastClient

MIN_SERVER = (2, 14)


class NatsVersionError(RuntimeError):
    pass


class NatsConnectError(RuntimeError):
    pass


async def connect(url: str, *, name: str = "streamproc", **options: object) -> FastClient:
    """Connect and refuse servers older than 2.14 (per-subject expected-sequence fixes)."""
    opts: dict[str, object] = {
        "name": name,
        "max_reconnect_attempts": 3,
        "error_cb": _quiet,
        "reconnect_time_wait": 0.5,
        "connect_timeout": 5,
        "allow_reconnect": True,
        "pending_size": 64 * 1024 * 1024,
    }
    opts.update(options)
    nc = FastClient()
    try:
        await nc.connect(servers=[url], **opts)  # type: ignore[arg-type]
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        raise NatsConnectError(f"cannot connect to NATS at {url}: {reason}") from None
    # Bounded attempts for the first connection (a clear error), unbounded once running.
    nc.options["max_reconnect_attempts"] = -1
    v = nc.connected_server_version
    if (v.major, v.minor) < MIN_SERVER:
        await nc.close()
        raise NatsVersionError(
            f"nats-server at {url} is {v.major}.{v.minor}.{v.patch}; streamproc needs >= "
            f"{MIN_SERVER[0]}.{MIN_SERVER[1]}"
        )
    return nc


async def _quiet(exc: Exception) -> None:
    """Connection errors surface through the calls that fail; don't spam stderr."""
