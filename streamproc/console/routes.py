"""Serve the operator console's static files at ``/ui`` with strict security headers.

The console is plain HTML, CSS and JavaScript modules shipped in ``static/`` (no build step);
it talks only to the public REST API (``/api/v1/scheduler``) with the operator's access token,
each request DPoP-signed in the browser (``static/dpop.js``).
Mount it from the gateway's ``routes`` hook with ``mount_console(app, ctx)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

STATIC_DIR = Path(__file__).resolve().parent / "static"
PREFIX = "/ui"
CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-cache",
}
_MOUNTED = web.AppKey("console_mounted", bool)


def _is_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


async def _add_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Security headers on every ``/ui`` answer (pages, assets and 404s alike)."""
    if _is_console(request.path):
        for name, value in SECURITY_HEADERS.items():
            response.headers[name] = value


async def _index(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


def mount_console(app: web.Application, ctx: Any = None) -> None:
    """Add ``/ui``, ``/ui/`` (the page) and ``/ui/<asset>`` to ``app``; idempotent."""
    del ctx  # the console needs nothing from the role: it calls the public API
    if app.get(_MOUNTED):
        return
    app[_MOUNTED] = True
    app.router.add_get(PREFIX, _index, name="console-index")
    app.router.add_get(PREFIX + "/", _index, name="console-index-slash")
    app.router.add_static(PREFIX, STATIC_DIR, name="console-static", append_version=False)
    app.on_response_prepare.append(_add_headers)
