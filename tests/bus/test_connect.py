"""NATS credentials and TLS against real nats-servers configured to demand them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nkeys
import pytest

from streamproc.bus import jsapi
from streamproc.bus.connect import NatsAuth, NatsConnectError, connect
from streamproc.config import ConfigError
from streamproc.natsd.server import EmbeddedNats, free_port
from tests.gateway.auth.test_mtls import make_pki

FAST = {"max_reconnect_attempts": 1, "reconnect_time_wait": 0.05, "connect_timeout": 1}
"""A refused connection fails at once instead of after the retries."""


@contextmanager
def server(tmp_path: Path, extra: str) -> Iterator[EmbeddedNats]:
    srv = EmbeddedNats(tmp_path / "nats", port=free_port(), extra_config=extra).start()
    try:
        yield srv
    finally:
        srv.stop()


async def works(url: str, auth: NatsAuth | None) -> None:
    nc = await connect(url, auth=auth, **FAST)
    try:
        info = await jsapi.request(nc, "INFO")  # JetStream answers this account
        assert "streams" in info
    finally:
        await nc.close()


async def refused(url: str, auth: NatsAuth | None) -> str:
    with pytest.raises(NatsConnectError) as exc:
        await connect(url, auth=auth, **FAST)
    return str(exc.value)


async def test_user_and_password(tmp_path: Path) -> None:
    with server(tmp_path, 'authorization { user: svc, password: "s3cr3t" }\n') as srv:
        await works(srv.url, NatsAuth(user="svc", password="s3cr3t"))
        assert "Authorization Violation" in await refused(
            srv.url, NatsAuth(user="svc", password="wrong")
        )
        await refused(srv.url, None)


async def test_token_and_a_comma_separated_server_list(tmp_path: Path) -> None:
    with server(tmp_path, 'authorization { token: "tok-123" }\n') as srv:
        dead = f"nats://127.0.0.1:{free_port()}"
        await works(f"{dead}, {srv.url}", NatsAuth(token="tok-123"))
        await refused(srv.url, NatsAuth(token="other"))


async def test_nkey_seed_file(tmp_path: Path) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    (tmp_path / "user.nk").write_bytes(seed + b"\n")
    with server(tmp_path, f"authorization {{ users = [ {{ nkey: {public} }} ] }}\n") as srv:
        await works(
            srv.url,
            NatsAuth.from_env({"STREAMPROC_NATS_NKEY_SEED_FILE": str(tmp_path / "user.nk")}),
        )
        await refused(srv.url, None)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
async def test_tls_with_a_client_certificate(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    pki = make_pki(tmp_path)
    key = {n: str(p.with_suffix(".key")) for n, p in pki.items()}
    tls = (
        f'tls {{ cert_file: "{pki["server"]}", key_file: "{key["server"]}", '
        f'ca_file: "{pki["ca"]}", verify: true }}\n'
    )
    full = NatsAuth(tls_ca=str(pki["ca"]), tls_cert=str(pki["client"]), tls_key=key["client"])
    with server(tmp_path, tls) as srv:
        await works(srv.url, full)
        await refused(srv.url, NatsAuth(tls_ca=str(pki["ca"])))  # no client certificate
        # The system CAs do not know this server: an error, not a hang.
        assert "certificate verify failed" in await refused(srv.url, None)
    # TLS configured but the server speaks plain text: refused, not silently downgraded.
    assert "does not use TLS" in await refused(nats_server.url, full)


def test_settings_problems_name_the_variable(tmp_path: Path) -> None:
    (tmp_path / "not-a-seed").write_text("hello\n")
    cases = {
        "STREAMPROC_NATS_PASSWORD: missing: a user is set": {"STREAMPROC_NATS_USER": "u"},
        "STREAMPROC_NATS_TOKEN: give one way to authenticate, not user and token": {
            "STREAMPROC_NATS_USER": "u",
            "STREAMPROC_NATS_PASSWORD": "p",
            "STREAMPROC_NATS_TOKEN": "t",
        },
        "STREAMPROC_NATS_CREDS_FILE: cannot read /nonexistent.creds": {
            "STREAMPROC_NATS_CREDS_FILE": "/nonexistent.creds"
        },
        "STREAMPROC_NATS_NKEY_SEED_FILE: " + str(tmp_path / "not-a-seed") + " holds no NKey": {
            "STREAMPROC_NATS_NKEY_SEED_FILE": str(tmp_path / "not-a-seed")
        },
        "STREAMPROC_NATS_TLS_CA: " + str(tmp_path / "not-a-seed") + " holds no PEM": {
            "STREAMPROC_NATS_TLS_CA": str(tmp_path / "not-a-seed")
        },
        "STREAMPROC_NATS_TLS_KEY: missing: tls_cert is set": {
            "STREAMPROC_NATS_TLS_CERT": str(tmp_path / "not-a-seed")
        },
    }
    for message, env in cases.items():
        with pytest.raises(ConfigError) as exc:
            NatsAuth.from_env(env)
        assert str(exc.value).startswith(message), str(exc.value)
    assert not NatsAuth.from_env({})
    assert "s3cr3t" not in repr(NatsAuth(user="u", password="s3cr3t"))


def test_the_password_and_token_are_taken_as_given_the_paths_stripped() -> None:
    env = {"STREAMPROC_NATS_USER": " u ", "STREAMPROC_NATS_PASSWORD": " p w "}
    auth = NatsAuth.from_env(env)
    assert (auth.user, auth.password) == ("u", " p w ")
    assert NatsAuth.from_env({"STREAMPROC_NATS_TOKEN": " t "}).token == " t "
