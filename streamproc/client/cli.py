"""``streamproc api METHOD PATH``: one call to the gateway, signed as every client of ours
signs (DPoP with the data directory's key, the nonce challenge taken), for what one would
otherwise do with ``curl`` against a gateway that accepts DPoP-bound tokens only.

The answer's body goes to stdout; a status other than 2xx also goes to stderr with the
problem's ``detail`` and ends the command with code 1.
"""

from __future__ import annotations

import argparse
import select
import sys
from pathlib import Path

import uvloop

from streamproc import exitcodes
from streamproc.cliargs import add_config_flag, configuration
from streamproc.client.http import ApiClient, Reply
from streamproc.client.settings import absolute_http_url, client_of, dpop_key, token_source
from streamproc.config import ConfigError, load
from streamproc.configfile.registry import env_name
from streamproc.names import ADMIN_SCOPE, API_BASE, READ_SCOPE

TOKEN_ENV = env_name("client.token")
URL_ENV = env_name("client.api_url")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "api", help="call the gateway's API, DPoP-signed (curl for a DPoP-only gateway)"
    )
    p.add_argument("--data-dir", help="where the client's DPoP key is (default ./data)")
    add_config_flag(p)
    p.add_argument("method", type=str.upper, help="GET, POST, PUT, PATCH or DELETE")
    p.add_argument(
        "path", help=f"below {API_BASE} (e.g. /schedules?limit=5), or a path from / (/openapi.json)"
    )
    p.add_argument(
        "--url",
        help=f"the gateway (default ${URL_ENV}, else http://HTTP_HOST:HTTP_PORT of the settings: "
        "the one `streamproc up` serves)",
    )
    p.add_argument(
        "--token",
        help=f"access token bound to this client's DPoP key (default ${TOKEN_ENV}; else client "
        "credentials: docs/configuration.md, section client)",
    )
    p.add_argument("--tenant", help="the tenant to ask the token endpoint for (client credentials)")
    p.add_argument("--data", help="request body (JSON); @FILE reads it from a file, @- from stdin")
    p.add_argument(
        "-H", "--header", action="append", default=[], metavar="NAME: VALUE",
        help="an extra request header (repeatable), e.g. 'If-Match: \"3\"'",
    )  # fmt: skip
    p.set_defaults(fn=cmd_api)


def _body(data: str | None) -> bytes | None:
    if data is None:
        return None
    if data == "@-":
        return sys.stdin.buffer.read()
    if data.startswith("@"):
        try:
            return Path(data[1:]).read_bytes()
        except OSError as exc:
            raise ConfigError(f"--data {data}: {exc.strerror}") from None
    return data.encode()


def _headers(lines: list[str], body: bytes | None) -> dict[str, str]:
    out = {"Accept": "application/json"}
    if body is not None:
        out["Content-Type"] = "application/json"
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"--header {line!r}: NAME: VALUE")
        out[name.strip()] = value.strip()
    return out


def _write_all(data: bytes) -> None:
    """All of ``data`` to stdout: an unbuffered stdout (``PYTHONUNBUFFERED``) is a raw file
    whose one ``write`` may take only part of a large answer into a pipe."""
    out = sys.stdout.buffer
    view = memoryview(data)
    while view:
        n = out.write(view)
        if n is None:  # a non-blocking stdout that is full: wait for the reader
            select.select([], [out], [])
            continue
        view = view[n:]
    out.flush()


def cmd_api(args: argparse.Namespace) -> int:
    settings = load({"data_dir": args.data_dir}, configuration(args))
    conf = settings.configuration
    base = args.url or conf.get(URL_ENV) or f"http://{settings.http_host}:{settings.http_port}"
    base = absolute_http_url("--url", base.rstrip("/"))
    path = args.path if args.path.startswith(("/api/", "/openapi.json")) else API_BASE + (
        args.path if args.path.startswith("/") else "/" + args.path)  # fmt: skip
    client = client_of(settings.configuration)
    key = dpop_key(settings.data_dir, client)
    scopes = (READ_SCOPE,) if args.method == "GET" else (ADMIN_SCOPE,)
    tokens = token_source(
        key, token=args.token or conf.get(TOKEN_ENV), token_flag=f"--token / {TOKEN_ENV}",
        scopes=scopes, client=client,
    )  # fmt: skip
    body = _body(args.data)
    headers = _headers(args.header, body)

    async def call() -> Reply:
        async with ApiClient(key, tokens) as api:
            return await api.request(
                args.method, base + path, tenant=args.tenant, data=body, headers=headers
            )

    reply = uvloop.run(call())
    sys.stdout.flush()
    _write_all(reply.body + (b"\n" if reply.body and not reply.body.endswith(b"\n") else b""))
    if 200 <= reply.status < 300:
        return exitcodes.OK
    print(f"streamproc: {args.method} {path}: {reply.status}: {reply.detail()}", file=sys.stderr)
    return exitcodes.FAILED
