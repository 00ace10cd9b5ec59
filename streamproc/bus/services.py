"""Queries between roles as NATS services (nats-py's ``nats.micro``).

The role that holds some state answers questions about it — the planner impact previews,
the auditor chain verifications — as a micro service: named ``<prefix>_<service>``, one
endpoint per question on ``<prefix>.svc.<service>.<endpoint>``, every instance in the same
queue group, so NATS hands each request to exactly one of however many instances run, and
``$SRV.PING|INFO|STATS.<name>`` list them. A caller (the gateway) asks with a deadline:
:class:`ServiceUnavailable` when nobody answers (no responders, or none in time), the
service's own :class:`ServiceFailure` (an HTTP-like status) when it answered with an error.

``nats.micro`` takes a plain nats-py client; :class:`~streamproc.bus.fastclient.FastClient`
is one (its raw fast path only serves the subscriptions registered through it), so services
share the process's connection.

A nats-py subscription runs its callback one message at a time; the handler here starts a
task per request (at most ``concurrency`` at once, the next request waits for a slot), so a
long question does not hold up the short ones behind it. An error answer never carries an
exception's text (paths, internals): a handler's own :class:`ServiceFailure` says what the
caller may know, anything else is logged here and answered as a bare 500.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Mapping

import msgspec
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.micro import add_service
from nats.micro.request import ERROR_CODE_HEADER, ERROR_HEADER, Request
from nats.micro.service import Service

from streamproc.ids import ascii_int
from streamproc.names import service_subject

log = logging.getLogger(__name__)
VERSION = "1.0.0"
"""Of every streamproc service; a new field is optional on both sides, so it stays."""

Handler = Callable[[bytes], Awaitable[bytes]]
"""Request body in, response body out; raise :class:`ServiceFailure` to answer an error."""


class ServiceFailure(Exception):
    """An answer that is an error: ``status`` as in HTTP (4xx: the question; 5xx: the
    service), ``slug`` for the problem type, ``detail`` for people, ``field`` the part of
    the question at fault (a JSON path), if one is."""

    def __init__(self, status: int, slug: str, detail: str, field: str | None = None) -> None:
        self.status = status
        self.slug = slug
        self.detail = detail
        self.field = field
        super().__init__(f"{status} {slug}: {detail}")


class ServiceUnavailable(Exception):
    """No instance answered: none runs (no responders) or none within the deadline."""


class _Problem(msgspec.Struct, omit_defaults=True):
    slug: str
    detail: str
    field: str | None = None


def service_name(prefix: str, service: str) -> str:
    """Micro service names allow letters, digits, ``-`` and ``_`` only."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{prefix}_{service}")


def subject(prefix: str, service: str, endpoint: str) -> str:
    return service_subject(prefix, service, endpoint)


class Served:
    """A running service: :meth:`stop` leaves the queue group, then ends answers in flight
    (and runs the service's own ``on_stop``)."""

    def __init__(
        self,
        service: Service,
        running: set[asyncio.Task[None]],
        on_stop: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.service = service
        self._running = running
        self._on_stop = on_stop

    async def stop(self) -> None:
        await self.service.stop()
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        if self._on_stop is not None:
            on_stop, self._on_stop = self._on_stop, None
            await on_stop()


async def serve(
    nc: Client,
    prefix: str,
    service: str,
    endpoints: Mapping[str, Handler],
    *,
    description: str,
    metadata: Mapping[str, str] | None = None,
    concurrency: int = 8,
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> Served:
    """Start the service with its endpoints in the queue group of its name."""
    name = service_name(prefix, service)
    svc = await add_service(
        nc,
        name=name,
        version=VERSION,
        description=description,
        metadata=dict(metadata or {}),
        queue_group=name,
    )
    slots = asyncio.Semaphore(concurrency)
    running: set[asyncio.Task[None]] = set()

    def wrap(endpoint: str, handler: Handler) -> Callable[[Request], Awaitable[None]]:
        async def answer(req: Request) -> None:
            try:
                try:
                    data = await handler(req.data)
                except ServiceFailure as exc:
                    body = msgspec.json.encode(_Problem(exc.slug, exc.detail, exc.field))
                    await req.respond_error(str(exc.status), exc.detail, data=body)
                except Exception:  # a bug: log it, say only that, keep serving
                    log.exception("%s.%s failed", name, endpoint)
                    detail = f"{endpoint} failed (the service's log says why)"
                    body = msgspec.json.encode(_Problem("internal", detail))
                    await req.respond_error("500", detail, data=body)
                else:
                    await req.respond(data)
            except Exception as exc:  # the connection went away: the caller's deadline passes
                log.debug("%s.%s: could not answer: %s", name, endpoint, exc)
            finally:
                slots.release()

        async def dispatch(req: Request) -> None:
            await slots.acquire()
            task = asyncio.create_task(answer(req), name=f"{name}.{endpoint}")
            running.add(task)
            task.add_done_callback(running.discard)

        return dispatch

    for endpoint, handler in endpoints.items():
        await svc.add_endpoint(
            name=endpoint,
            subject=subject(prefix, service, endpoint),
            handler=wrap(endpoint, handler),
        )
    return Served(svc, running, on_stop)


async def call(nc: Client, subject: str, body: bytes, timeout: float) -> bytes:
    """Ask one instance; the answer's body, :class:`ServiceFailure` or
    :class:`ServiceUnavailable`."""
    try:
        msg = await nc.request(subject, body, timeout=timeout)
    except NoRespondersError:
        raise ServiceUnavailable("no instance runs") from None
    except NatsTimeout:
        raise ServiceUnavailable(f"none answered within {timeout:g} s") from None
    headers = msg.headers or {}
    code = headers.get(ERROR_CODE_HEADER)
    if code is None:
        return msg.data
    try:
        problem = msgspec.json.decode(msg.data, type=_Problem)
    except msgspec.DecodeError:
        problem = _Problem("service-error", headers.get(ERROR_HEADER, ""))
    status = ascii_int(code, 3) or 500
    raise ServiceFailure(status, problem.slug, problem.detail, problem.field)
