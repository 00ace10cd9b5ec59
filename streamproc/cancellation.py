"""A cancellation that a library call lost, raised again at the next turn of a loop.

On Python 3.11, ``asyncio.wait_for`` returns the awaited result when its task is cancelled
in the instant that result arrives: the ``CancelledError`` is dropped, while the task's
count of cancel requests (``Task.cancelling()``) stays raised (fixed in 3.12, gh-86296).
nats-py waited that way in every request, so a background loop cancelled by a shutdown
could carry on as if nothing had happened, and the shutdown's ``await task`` would wait for
ever (seen: a heartbeat that kept beating after ``System.close()`` cancelled it).
``FastClient`` now waits for replies with ``asyncio.timeout``, as do our own waits; nats-py
still uses ``wait_for`` in ``flush``, its KV watchers and its async-publish window, and any
library may. So every loop that runs until cancelled also calls :func:`checkpoint` at each
turn: a stop dropped anywhere below it ends the loop at its next turn.

At the bottom of the layer order, beside ``signals``: the bus, the roles and the runtime
all stop their loops the same way.
"""

from __future__ import annotations

import asyncio


def checkpoint() -> None:
    """Raise ``CancelledError`` if this task was asked to stop and the request was lost.

    ``asyncio.timeout`` and ``TaskGroup`` withdraw their own requests (``uncancel``) when
    they absorb them, so a raised count here is always a stop nobody has acted on."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
