"""Stopping a long-running command on SIGINT/SIGTERM.

At the bottom of the layer order (docs/architecture.md) so the embedded cluster
(``natsd/cluster.py``), the role runtime (``runtime/app.py``) and the commands share one way
to stop.
"""

from __future__ import annotations

import asyncio
import signal


def install_stop_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGINT or SIGTERM instead of raising in whatever task runs."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
