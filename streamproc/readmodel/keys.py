"""Key layout of the read model and its opaque paging cursors.

Every key starts with ``tenant + NUL``: tenant ids cannot contain NUL, so a scan of one
tenant's prefix can never reach another tenant's records, whatever a cursor says.
"""

from __future__ import annotations

import base64
import binascii

SEP = b"\x00"
MAX_SEQ = (1 << 64) - 1
_CURSOR_VERSION = b"\x01"


class CursorError(ValueError):
    """A paging cursor that this server did not issue (or issued for another listing)."""


def tenant_prefix(tenant: str) -> bytes:
    return tenant.encode() + SEP


def key(tenant: str, *parts: str) -> bytes:
    """``tenant NUL part NUL part …``, encoded once (every fold and read builds keys)."""
    return (tenant + "\x00" + "\x00".join(parts)).encode()


def newest_first(seq: int) -> bytes:
    """Big-endian inverted sequence: ascending key order is descending stream order."""
    return (MAX_SEQ - seq).to_bytes(8, "big")


def encode_cursor(prefix: bytes, last_key: bytes) -> str:
    """The key suffix after ``prefix``, so a cursor carries no tenant and cannot widen a scan."""
    return base64.urlsafe_b64encode(_CURSOR_VERSION + last_key[len(prefix) :]).decode().rstrip("=")


def decode_cursor(prefix: bytes, cursor: str | None) -> bytes:
    """The scan start strictly after the cursor's key (``prefix`` when there is no cursor)."""
    if not cursor:
        return prefix
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise CursorError("cursor is not valid base64url") from None
    if not raw.startswith(_CURSOR_VERSION) or len(raw) > 2048:
        raise CursorError("cursor was not issued by this server")
    return prefix + raw[1:] + b"\x00"
