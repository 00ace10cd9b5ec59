"""A leaky bucket as a meter (GCRA, the generic cell rate algorithm), in integer nanoseconds.

One number is the whole state of a bucket: its theoretical arrival time (TAT), the time by
which every token granted so far would have been spent at exactly ``rate``. A token
conforms at ``now`` if the TAT is at most ``now + tolerance``; taking ``n`` tokens moves the
TAT ``n`` intervals on from ``max(TAT, now)``. Because the state is one number, any number of
processes can share a bucket by compare-and-set on it (:mod:`streamproc.runner.ratebucket`).

A runner takes tokens in small batches and may keep one unused for up to ``hold`` before it
is dropped. A call then happens at most ``hold`` after its token's grant, so in any window of
``w`` seconds the calls are at most the grants in ``w + hold`` seconds: ``(w + hold) · rate +
shared burst``. The configured burst ``B`` (``STREAMPROC_PLANNER_BURST_S`` seconds of the
rate, at least one call) is therefore split: a quarter of it is the hold, the rest is the
shared bucket's tolerance — together never more than ``w · rate + B`` calls in any window.
(A hold is never under 20 ms, the time a token takes to reach its call: with a burst of
less than 80 ms of the rate, the window may hold those 20 ms of the rate instead.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NS = 1_000_000_000
MIN_HOLD_NS = 20_000_000
"""A token handed to a waiting call is used at once; 20 ms covers getting it scheduled."""


@dataclass(frozen=True)
class Gcra:
    interval_ns: int
    """One token per interval: ``1/rate``, rounded up (never faster than the rate)."""
    tolerance_ns: int
    """How far the TAT may run ahead of now: the shared bucket's burst less one token."""
    hold_ns: int
    """How long a runner may keep a granted token before using it."""
    burst: float
    """What any window may hold beyond ``w · rate``: the configured burst in tokens (at
    least one), or more only where the configured hold would be under
    :data:`MIN_HOLD_NS` (a burst of less than 80 ms of the rate)."""


def params(rate: float, burst_s: float) -> Gcra:
    """The bucket of ``rate`` tokens/s whose burst is ``burst_s`` seconds of it (at least 1)."""
    if rate <= 0 or burst_s <= 0:
        raise ValueError(f"a bucket needs rate > 0 and burst > 0 s, got {rate}, {burst_s}")
    interval = math.ceil(NS / rate)
    burst = max(1.0, rate * burst_s)
    held = min(burst / 4, burst - 1)  # tokens' worth of hold; the shared bucket keeps >= 1
    tolerance = math.floor((burst - held - 1) * interval)
    hold = max(MIN_HOLD_NS, math.floor(held * interval))
    return Gcra(
        interval_ns=interval,
        tolerance_ns=tolerance,
        hold_ns=hold,
        burst=max(burst, (tolerance + hold) / interval + 1),
    )


@dataclass(frozen=True)
class Take:
    granted: int
    tat_ns: int
    """The TAT after the grant (unchanged when nothing was granted)."""
    retry_ns: int
    """When nothing was granted: the time ``want`` tokens conform (at most as many as the
    tolerance holds; else 0)."""


def take(g: Gcra, tat_ns: int, now_ns: int, want: int) -> Take:
    """Grant up to ``want`` tokens that conform at ``now_ns`` (the k-th token of a batch
    conforms when ``max(TAT, now) + (k - 1) · interval - tolerance <= now``)."""
    start = max(tat_ns, now_ns)
    room = (now_ns + g.tolerance_ns - start) // g.interval_ns + 1
    n = max(0, min(want, room))
    if n:
        return Take(n, start + n * g.interval_ns, 0)
    k = max(1, min(want, g.tolerance_ns // g.interval_ns + 1))
    return Take(0, tat_ns, start + (k - 1) * g.interval_ns - g.tolerance_ns)
