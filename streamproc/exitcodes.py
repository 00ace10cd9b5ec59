"""Every ``streamproc`` command's exit codes, and which error ends a command with which.

Scripts and supervisors branch on these (``Restart=on-failure``, a cron job retrying a feed
export), so they are written once here, documented in docs/operations.md, and pinned by
tests/test_exitcodes.py. Errors are named by module and class, not imported: the table stays
cheap to load for ``streamproc --help``, and the test checks that every name still resolves.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

OK = 0
FAILED = 1
"""The command ran and the answer is "no", or the work could not be done now: a chain that does
not verify, an unhealthy status, a gateway or NATS that went away. Running it again may succeed."""
USAGE = 2
"""Refused before doing anything: the command line, configuration, environment, the data
directory's state or the connection to NATS. Also a role process whose role failed."""
DRIFT = 3
"""``streams apply``: a stream differs in a way JetStream cannot change in place."""
FAIL_CLOSED = 3
"""``notify tail``: the feed can no longer be followed without a gap (epoch, retention)."""
INTERRUPTED = 130
"""SIGINT (128 + 2)."""
BROKEN_PIPE = 141
"""The reader of stdout went away (128 + SIGPIPE 13), as ``cat`` reports it."""

ERRORS: dict[str, int] = {
    "streamproc.config.ConfigError": USAGE,
    "streamproc.runtime.app.ListenError": USAGE,
    "streamproc.bus.connect.NatsConnectError": USAGE,
    "streamproc.bus.connect.NatsVersionError": USAGE,
    "streamproc.bus.jsapi.JsApiError": USAGE,
    "streamproc.natsd.owner.NatsServerError": USAGE,
    "streamproc.runtime.lease.LeaseError": USAGE,
    "streamproc.runtime.projection.StateFormatError": USAGE,
    "streamproc.runtime.position.PositionError": USAGE,
    "streamproc.state.store.StateLocked": USAGE,
    "streamproc.audit.common.UsageError": USAGE,
    "streamproc.notify.consumer.ConsumerConflict": USAGE,
    "streamproc.notify.feed_consumer.FeedRefused": USAGE,
    "streamproc.notify.feed_consumer.FeedClosed": FAIL_CLOSED,
    "streamproc.notify.feed_consumer.FeedUnavailable": FAILED,
    "streamproc.notify.feed_consumer.PartitionFailed": FAILED,
    "streamproc.bus.pull.ConsumerGone": FAILED,
    "streamproc.client.http.Unreachable": FAILED,
    "streamproc.client.tokens.TokenUnavailable": FAILED,
    "nats.errors.ConnectionClosedError": FAILED,
    "streamproc.gateway.tokens_cli.KeyFileError": FAILED,
}
"""Error class (``module.Class``) → exit code. A subclass takes its nearest listed base's."""


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def code_for(exc: BaseException) -> int | None:
    """The exit code ``exc`` ends a command with, or None: not a known refusal (a bug)."""
    for cls in type(exc).__mro__:
        code = ERRORS.get(_name(cls))
        if code is not None:
            return code
    return None


def known(exc: BaseException) -> int:
    """The code of an error a command caught on purpose (it must be in :data:`ERRORS`)."""
    code = code_for(exc)
    if code is None:
        raise KeyError(f"{_name(type(exc))} is not in streamproc.exitcodes.ERRORS") from exc
    return code


A = TypeVar("A")


def guarded(fn: Callable[[A], int], prefix: str = "streamproc") -> Callable[[A], int]:
    """``fn`` with every error of :data:`ERRORS` turned into its message on stderr and its
    exit code; anything else (a bug) still raises with its traceback."""

    def run(args: A) -> int:
        try:
            return int(fn(args))
        except Exception as exc:
            code = code_for(exc)
            if code is None:
                raise
            print(f"{prefix}: {exc}", file=sys.stderr)
            return code

    return run
