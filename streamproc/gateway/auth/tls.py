"""TLS for the gateway's optional HTTPS listener, and what a request's client certificate
says (RFC 8705 thumbprint, subject names, issuer)."""

from __future__ import annotations

import errno
import hashlib
import os
import ssl
from typing import Any, cast

from aiohttp import web

from streamproc.gateway.auth.jwt import b64url
from streamproc.gateway.settings import Tls


def server_context(cfg: Tls, extra_cas: list[str] | None = None) -> ssl.SSLContext:
    """Server-side TLS; client certificates are requested (and verified) when CAs are set."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    cas = [*cfg.client_ca_files, *(extra_cas or [])]
    files = [("cert_file", cfg.cert_file), ("key_file", cfg.key_file), *(("CA", c) for c in cas)]
    for what, path in files:  # ssl's own error names no file
        if not os.path.isfile(path):
            raise FileNotFoundError(errno.ENOENT, f"TLS {what} not found", path)
    ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    if cas:
        for ca in dict.fromkeys(cas):
            ctx.load_verify_locations(ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def _ssl_object(request: web.Request) -> ssl.SSLObject | None:
    transport = request.transport
    return None if transport is None else transport.get_extra_info("ssl_object")


def peer_cert_der(request: web.Request) -> bytes | None:
    obj = _ssl_object(request)
    if obj is None:
        return None
    return obj.getpeercert(binary_form=True)


def peer_cert_info(request: web.Request) -> dict[str, Any]:
    """The verified client certificate as ``ssl`` decodes it ({} when none was verified)."""
    obj = _ssl_object(request)
    return (obj.getpeercert() or {}) if obj is not None else {}


def x5t_s256(der: bytes) -> str:
    """RFC 8705 ``x5t#S256``: base64url SHA-256 of the DER certificate."""
    return b64url(hashlib.sha256(der).digest())


def names_of(info: dict[str, Any]) -> set[str]:
    """Subject common names and DNS subject-alternative names of a decoded certificate."""
    names = {v for rdn in info.get("subject", ()) for k, v in rdn if k == "commonName"}
    names |= {v for k, v in info.get("subjectAltName", ()) if k == "DNS"}
    return names


def ca_subjects(ca_file: str) -> list[tuple[Any, ...]]:
    """Subjects of the CA certificates in ``ca_file``, in the form ``getpeercert`` uses."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca_file)
    return [cast(tuple[Any, ...], c["subject"]) for c in ctx.get_ca_certs()]
