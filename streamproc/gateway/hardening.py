"""Reading request bodies defensively: size caps on the wire and after decompression
(checked while inflating, so a bomb costs at most the cap), strict JSON decoding that names
the offending field, and the per-event key limit."""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec
import zstandard
from aiohttp import web

from streamproc.events.payloads import MAX_KEYS
from streamproc.problems import ProblemError

T = TypeVar("T")
_CHUNK = 64 * 1024
_AT = re.compile(r" - at `(\$[^`]*)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `([^`]*)`")
_NAMED = re.compile(r"^Object (?:contains unknown|missing required) field `([^`]*)`")
_ZSTD_MAX_WINDOW = 1 << 27


def too_large(what: str, size: int | None, cap: int) -> ProblemError:
    shown = f" ({size} bytes)" if size is not None else ""
    return ProblemError(413, "body-too-large", f"{what}{shown} exceeds {cap} bytes", limit=cap)


async def read_body(request: web.Request, cap: int) -> bytes:
    """The raw body, refusing (413) as soon as it is known to exceed ``cap``."""
    declared = request.content_length
    if declared is not None and declared > cap:
        raise too_large("request body", declared, cap)
    if declared is not None and declared <= _CHUNK:
        content = request.content
        if content.is_eof() and content.exception() is None:
            # The whole body came in with the headers (the usual small POST): take it as it
            # is buffered, without a read loop awaiting an end that has already come.
            data = content.read_nowait()
        else:
            data = await content.read()
        if len(data) > cap:
            raise too_large("request body", None, cap)
        return data
    buf = bytearray()
    while True:
        chunk = await request.content.readany()
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > cap:
            raise too_large("request body", None, cap)


def decode_content(body: bytes, encoding: str | None, cap: int) -> bytes:
    """Undo ``Content-Encoding`` (identity, gzip, zstd) without ever holding more than ``cap``."""
    enc = (encoding or "identity").strip().lower()
    if enc == "identity":
        return body
    try:
        if enc in ("gzip", "x-gzip"):
            return _gunzip(body, cap)
        if enc == "zstd":
            return _unzstd(body, cap)
    except (zlib.error, zstandard.ZstdError) as exc:
        raise ProblemError(400, "invalid-encoding", f"{enc} body does not decode: {exc}") from None
    raise ProblemError(
        415,
        "unsupported-encoding",
        f"Content-Encoding {enc!r} is not supported (gzip, zstd)",
        headers={"Accept-Encoding": "gzip, zstd"},
    )


def _gunzip(body: bytes, cap: int) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    data = body
    while data:
        out += d.decompress(data, cap + 1 - len(out))
        if len(out) > cap:
            raise too_large("decompressed body", None, cap)
        data = d.unconsumed_tail
        if d.eof:
            break
    if not d.eof:
        raise zlib.error("truncated gzip stream")
    if d.unused_data:
        raise zlib.error("data after the end of the gzip stream")
    return bytes(out)


def _unzstd(body: bytes, cap: int) -> bytes:
    dctx = zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
    out = bytearray()
    with dctx.stream_reader(io.BytesIO(body), read_across_frames=True) as reader:
        while True:
            chunk = reader.read(min(_CHUNK, cap + 1 - len(out)))
            if not chunk:
                break
            out += chunk
            if len(out) > cap:
                raise too_large("decompressed body", None, cap)
    return bytes(out)


def require_json(request: web.Request) -> None:
    raw = request.headers.get("Content-Type", "")
    if raw.startswith("application/json") and (len(raw) == 16 or raw[16] in "; "):
        return  # the common case, without parsing parameters
    ctype = request.content_type
    if ctype != "application/json" and not ctype.endswith("+json"):
        raise ProblemError(
            415, "unsupported-media-type", f"Content-Type must be application/json, not {ctype!r}"
        )


_POST_INIT = (
    ("invalid cron expression", "whenCron"),
    ("unknown IANA time zone", "timezone"),
    ("status ", "status"),
)


def field_of(message: str) -> str:
    """The JSON path msgspec names in a validation message (``$`` if none)."""
    m = _AT.search(message)
    path = m.group(1) if m else "$"
    u = _NAMED.match(message)
    if u:
        return f"{path}.{u.group(1)}"
    for start, name in _POST_INIT:  # raised by a Struct's __post_init__: name its field
        if message.startswith(start):
            return f"{path}.{name}"
    return path


def decode_json(
    data: bytes,
    decoder: msgspec.json.Decoder[T],
    renamed: Mapping[tuple[str, str], str] | None = None,
) -> T:
    """Decode and validate, or 400 naming the field (unknown fields are refused too).

    ``renamed``: names this API took before, by (JSON path, name), each with what to say
    instead — a body that uses one learns the name to use."""
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        field = field_of(msg)
        u = _UNKNOWN.match(msg) if renamed else None
        if renamed and u:
            at = _AT.search(msg)
            hint = renamed.get((at.group(1) if at else "$", u.group(1)))
            if hint:
                msg = f"unknown field `{u.group(1)}`: {hint}"
        raise ProblemError(400, "invalid-body", msg, field=field) from None
    except msgspec.DecodeError as exc:
        raise ProblemError(400, "malformed-json", f"malformed JSON: {exc}", field="$") from None


class _KeyCount(msgspec.Struct, rename="camel"):
    changed_product_keys: list[msgspec.Raw] = []
    kev: list[msgspec.Raw] = []
    changed_claims: list[msgspec.Raw] = []
    advisories: list[dict[str, Any]] = []


def count_keys(data: bytes) -> int:
    """Keys in an export body, counted without validating them (for the 413 message)."""
    try:
        c = msgspec.json.decode(data, type=_KeyCount)
    except msgspec.MsgspecError:
        return -1
    advisory_keys = sum(len(a.get("productKeys", ())) for a in c.advisories if isinstance(a, dict))
    return len(c.changed_product_keys) + len(c.kev) + len(c.changed_claims) + advisory_keys


def check_key_count(n: int) -> None:
    if n > MAX_KEYS:
        raise ProblemError(
            413,
            "too-many-keys",
            f"{n} keys in one event; at most {MAX_KEYS} are accepted",
            count=n,
            limit=MAX_KEYS,
        )


def decode_export(data: bytes, decoder: msgspec.json.Decoder[T]) -> T:
    """Like :func:`decode_json`, but a key list over the limit is 413 with the count."""
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        if "length <=" in msg:
            n = count_keys(data)
            if n > MAX_KEYS:
                check_key_count(n)
        raise ProblemError(400, "invalid-body", msg, field=field_of(msg)) from None
    except msgspec.DecodeError as exc:
        raise ProblemError(400, "malformed-json", f"malformed JSON: {exc}", field="$") from None
