"""The console's static routes: files served, security headers, no inline script, 404s."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from streamproc.console.routes import STATIC_DIR, mount_console


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    app = web.Application()
    mount_console(app, None)
    mount_console(app, None)  # idempotent: a second mount adds nothing

    async def other(_request: web.Request) -> web.Response:
        return web.json_response({})

    app.router.add_get("/api/x", other)
    async with TestClient(TestServer(app)) as c:
        yield c


def assert_secure(resp: object) -> None:
    headers = resp.headers  # type: ignore[attr-defined]
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "frame-ancestors 'none'" in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"


@pytest.mark.parametrize("path", ["/ui", "/ui/"])
async def test_index_is_served_with_strict_headers(client: TestClient, path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 200
    assert resp.content_type == "text/html"
    assert "/ui/app.js" in await resp.text()
    assert_secure(resp)


@pytest.mark.parametrize(
    ("name", "ctype"),
    [
        ("app.js", "javascript"),
        ("cron.js", "javascript"),
        ("links.js", "javascript"),
        ("app.css", "text/css"),
    ],
)
async def test_assets_are_served_with_their_types(
    client: TestClient, name: str, ctype: str
) -> None:
    resp = await client.get(f"/ui/{name}")
    assert resp.status == 200
    assert ctype in resp.content_type
    assert await resp.read() == (STATIC_DIR / name).read_bytes()
    assert_secure(resp)


@pytest.mark.parametrize(
    "path", ["/ui/nope.js", "/ui/static/app.js", "/ui/../routes.py", "/ui/%2e%2e/routes.py"]
)
async def test_unknown_paths_are_404_and_still_locked_down(client: TestClient, path: str) -> None:
    resp = await client.get(path)
    assert resp.status in (403, 404)
    assert b"def mount_console" not in await resp.read()
    if resp.url.path.startswith("/ui/"):
        assert_secure(resp)


async def test_other_routes_are_left_alone(client: TestClient) -> None:
    resp = await client.get("/api/x")
    assert resp.status == 200
    assert "Content-Security-Policy" not in resp.headers


def test_pages_have_no_inline_script_or_style() -> None:
    html = (STATIC_DIR / "index.html").read_text()
    scripts = re.findall(r"<script\b[^>]*>", html)
    assert scripts and all('src="/ui/' in s for s in scripts)
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", html), "inline script"
    assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler"
    assert "<style" not in html and "style=" not in html
    for js in STATIC_DIR.glob("*.js"):
        text = js.read_text()
        assert "innerHTML" not in text and "eval(" not in text, js.name
        assert "localStorage" not in text, "the token is kept in sessionStorage only"
