"""The gateway role: the read-model projections plus the HTTP routes.

Register it once in ``streamproc/roles.py`` (``"gateway": GATEWAY``). Its settings come from
``STREAMPROC_GATEWAY_CONFIG`` and ``STREAMPROC_GATEWAY_*`` (see ``docs/api.md``).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from streamproc.console.routes import mount_console
from streamproc.gateway.app import mount_gateway
from streamproc.gateway.settings import GatewaySettings, configured
from streamproc.readmodel import READ_MODEL, Runs
from streamproc.readmodel.settings import runs
from streamproc.runtime.reactor import Configured, RoleContext, RoleSpec


def make_mount(
    settings: GatewaySettings | None = None,
) -> Callable[[web.Application, RoleContext], None]:
    """A ``routes`` hook with fixed settings (tests, benches) or, by default, those of the
    process's configuration."""

    def mount(app: web.Application, ctx: RoleContext) -> None:
        mount_gateway(app, ctx, settings if settings is not None else configured_gateway(ctx))
        mount_console(app, ctx)

    return mount


def configured_gateway(ctx: RoleContext) -> GatewaySettings:
    return configured(ctx.settings.configuration)


mount = make_mount()
GATEWAY = RoleSpec(
    [Configured(runs) if make is Runs else make for make in READ_MODEL], routes=mount
)
"""The read model, its runs kept for the configured retention."""
