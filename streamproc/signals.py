"""Stopping a long-running command on SIGINT/SIGTERM.

At the bottom of the layer order (docs/architecture.md) so the embedded cluster
(``natsd/cluster.py``), the role runtime (``runtime/app.py``) and the commands share one way
to stop.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine, Mapping
from typing import Any


def install_stop_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGINT or SIGTERM instead of raising in whatever task runs."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def until_signalled(
    main: Coroutine[Any, Any, int], codes: Mapping[signal.Signals, int]
) -> int:
    """Run ``main`` to its end, or until one of the signals in ``codes`` arrives: then cancel
    it (its cleanup runs) and return that signal's exit code.

    The handlers are the loop's own, installed whatever the process inherited: a command
    started with SIGINT ignored (a background job of a script, ``nohup``) would otherwise
    never stop on it, since Python keeps an inherited ``SIG_IGN``."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    got: list[int] = []

    def stop(code: int) -> None:
        got.append(code)
        task.cancel()

    for sig, code in codes.items():
        loop.add_signal_handler(sig, stop, code)
    try:
        return await task
    except asyncio.CancelledError:
        if not got:
            raise
        return got[0]
    finally:
        for sig in codes:
            loop.remove_signal_handler(sig)
