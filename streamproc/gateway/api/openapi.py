"""The OpenAPI 3.1 document, generated from the operations and their msgspec Structs.

``python -m streamproc.gateway.api.openapi --out schemas/openapi.json`` writes it (``make
schemas``); a test fails when the checked-in file differs from the code.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from streamproc import __version__
from streamproc.gateway.api.operations import Operation
from streamproc.gateway.api.routes import OPERATIONS
from streamproc.names import WEBHOOK_SCOPE
from streamproc.problems import CONTENT_TYPE, Problem

_REF = "#/components/schemas/{name}"
_ERROR_TEXT = {
    400: "invalid request (the problem names the field)",
    401: "missing, invalid or unbound credentials (see WWW-Authenticate)",
    403: "the token lacks the required scope (a webhook: or its tenant is not the source's)",
    404: "no such resource for the caller's tenant",
    409: "conflict with the current state",
    412: "If-Match is not the current version",
    413: "body, decompressed body or key count too large",
    415: "unsupported Content-Type or Content-Encoding",
    429: "this client holds its share of live request ids; retry after Retry-After",
    502: "the role answering the query failed",
    503: "dependency unavailable (event log, replay bucket, no planner or auditor answered); "
    "retry after Retry-After",
}
_BEARER_SECURITY: list[dict[str, list[str]]] = [{"bearer": []}, {"dpop": []}, {"mtls": []}]
_WEBHOOK_SECURITY: list[dict[str, list[str]]] = [
    {sender: [], token: []}
    for sender in ("webhookSignature", "webhookMtls")
    for token in ("dpop", "mtls", "bearer")
]
"""A signature or client certificate, plus an access token (scope ``scheduler.webhook``;
a source configured with ``require_token = false`` takes none)."""


def document(operations: list[Operation]) -> dict[str, Any]:
    types: list[Any] = [Problem]
    for op in operations:
        if op.body is not None:
            types.append(op.body)
        types += [t for t, _ in op.responses.values() if t is not None]
    schemas, components = msgspec.json.schema_components(
        list(dict.fromkeys(types)), ref_template=_REF
    )
    refs = dict(zip(dict.fromkeys(types), schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.full_path, {})[op.method.lower()] = _operation(op, refs)
    paths["/openapi.json"] = {
        "get": {
            "operationId": "getOpenApi",
            "summary": "This document",
            "tags": ["meta"],
            "security": [],
            "responses": {"200": {"description": "OpenAPI 3.1 document"}},
        }
    }
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "streamproc Scheduler API",
            "version": __version__,
            "description": (
                "Schedules, runs, impact previews, audit chain verification and signed export "
                "webhooks. Writes are "
                "recorded as events and answered 202 with the event id and stream sequence; "
                "`?wait=true` answers once the gateway's read model has applied them. Errors "
                "are RFC 9457 problem documents."
            ),
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT (EdDSA)",
                    "description": "Unbound token; only if the server admits mode 'bearer'.",
                },
                "dpop": {
                    "type": "http",
                    "scheme": "DPoP",
                    "bearerFormat": "JWT (EdDSA) with cnf.jkt",
                    "description": "RFC 9449: Authorization: DPoP <token> plus a DPoP proof "
                    "(EdDSA or ES256).",
                },
                "mtls": {
                    "type": "mutualTLS",
                    "description": "RFC 8705: a bearer token with cnf.x5t#S256 of the client "
                    "certificate presented on the TLS listener.",
                },
                "webhookSignature": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Scheduler-Signature",
                    "description": "sha256=<hex HMAC> or ed25519=<base64> over "
                    "timestamp + '.' + body, with X-Scheduler-Timestamp and X-Scheduler-Delivery.",
                },
                "webhookMtls": {"type": "mutualTLS"},
            },
        },
    }


def _operation(op: Operation, refs: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "tags": [op.tag],
        "security": _BEARER_SECURITY if op.scope else _WEBHOOK_SECURITY,
    }
    desc = op.description
    if op.scope:
        desc = f"Requires scope `{op.scope}`. {desc}".strip()
        out["x-required-scope"] = op.scope
    else:
        out["x-required-scope"] = WEBHOOK_SCOPE
    if desc:
        out["description"] = desc
    if op.params:
        out["parameters"] = [
            {
                "name": p.name,
                "in": p.where,
                "required": p.required or p.where == "path",
                "schema": p.schema,
                **({"description": p.description} if p.description else {}),
            }
            for p in op.params
        ]
    if op.body is not None:
        out["requestBody"] = {
            "required": op.body_required,
            "content": {"application/json": {"schema": refs[op.body]}},
        }
    responses: dict[str, Any] = {}
    for status, (t, text) in sorted(op.responses.items()):
        r: dict[str, Any] = {"description": text}
        if t is not None:
            r["content"] = {"application/json": {"schema": refs[t]}}
        if status in op.headers:
            r["headers"] = {
                k: {"schema": {"type": "string"}, "description": v}
                for k, v in op.headers[status].items()
            }
        responses[str(status)] = r
    for status in sorted({400, 401, 403, 429, *op.errors}):
        responses[str(status)] = {
            "description": _ERROR_TEXT.get(status, "error"),
            "content": {CONTENT_TYPE: {"schema": refs[Problem]}},
        }
    out["responses"] = responses
    return out


def render() -> str:
    return json.dumps(document(OPERATIONS), indent=2, sort_keys=False) + "\n"


_document: bytes | None = None


async def openapi_handler(_request: web.Request) -> web.Response:
    """``GET /openapi.json``: the document, rendered once per process."""
    global _document
    if _document is None:
        _document = render().encode()
    return web.Response(body=_document, content_type="application/json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write the gateway's OpenAPI document")
    parser.add_argument("--out", default="schemas/openapi.json")
    args = parser.parse_args(argv)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render())
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
