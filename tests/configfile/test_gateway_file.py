"""``streamproc config check`` on a gateway file (the format of ``gateway.config`` /
``STREAMPROC_GATEWAY_CONFIG``): the one ``up --demo`` writes and the docs/api.md example
validate; a bad one names the file's own keys."""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path

import pytest
from nacl.signing import SigningKey

from streamproc.config import Settings
from streamproc.devsetup import prepare_dev_auth
from tests.configfile.test_cli import run

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def b64_public_key() -> str:
    return base64.b64encode(bytes(SigningKey.generate().verify_key)).decode()


def test_the_file_up_demo_writes_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("STREAMPROC_GATEWAY_CONFIG", "STREAMPROC_PLANNER_DEBOUNCE_S"):
        monkeypatch.setenv(name, "")  # prepare_dev_auth sets them; restored afterwards
    monkeypatch.setenv("STREAMPROC_FEEDSER_SECRET", "unused")
    dev = prepare_dev_auth(Settings(data_dir=tmp_path / "data"))
    assert dev.config == (tmp_path / "data" / "dev" / "gateway.json").resolve()
    code, out, err = run(capsys, "config", "check", str(dev.config))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"ok: {dev.config} (a gateway file, for gateway.config / STREAMPROC_GATEWAY_CONFIG)",
        "  # gateway: 1 issuer(s) (https://authority.dev.local → demo); 2 webhook source(s) "
        "(feedser (feedser → demo), vexer (vexer → demo)); modes bearer, dpop",
    ]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_the_documented_gateway_toml_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.gateway.auth.test_mtls import make_pki

    example = re.search(
        r"Example \(`gateway.toml`\):\n\n```toml\n(.*?)```", API_MD.read_text(), re.S
    )
    assert example, "the gateway.toml example of docs/api.md"
    as_written = tmp_path / "as-written.toml"  # its secret and TLS files are not here
    as_written.write_text(example.group(1))
    code, _, err = run(capsys, "config", "check", str(as_written))
    assert code == 2 and "cannot read secret file /run/secrets/dpop-nonce" in err
    assert "tls: [Errno 2] TLS cert_file not found: '/etc/streamproc/tls/server.pem'" in err
    secrets, tls = tmp_path / "secrets", tmp_path / "tls"
    secrets.mkdir()
    tls.mkdir()
    (secrets / "authority-2025-10.pub").write_text(b64_public_key() + "\n")
    for name in ("dpop-nonce", "feedser-hmac", "feedser-hmac-next"):
        (secrets / name).write_text(f"{name}-0123456789abcdef0123456789abcdef\n")
    pki = make_pki(tls)
    shutil.copy(pki["ca"], tls / "clients-ca.pem")
    monkeypatch.setenv("VEXER_KEY_1", b64_public_key())
    monkeypatch.setenv("VEXER_KEY_2", b64_public_key())
    text = example.group(1).replace("/run/secrets/", f"{secrets}/")
    gateway = tmp_path / "gateway.toml"
    gateway.write_text(text.replace("/etc/streamproc/tls/", f"{tls}/"))
    code, out, err = run(capsys, "config", "check", str(gateway))
    assert (code, err) == (0, "")
    assert "2 webhook source(s) (feedser (feedser → acme, globex), vexer (vexer → acme))" in out
    assert "1 issuer(s) (https://authority.internal → acme, globex)" in out
    assert "TLS listener 0.0.0.0:8443" in out


def test_a_bad_gateway_file_names_its_own_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "gateway.json"
    bad.write_text('{"webhooks": [{"name": "f", "kind": "feedser", "tenants": []}]}')
    code, out, err = run(capsys, "config", "check", str(bad))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"streamproc: {bad}: 1 problem(s):",
        "  webhooks[0].tenants: Expected `array` of length >= 1",
    ]
    bad.write_text('{"isuers": []}')
    code, _, err = run(capsys, "config", "check", str(bad))
    assert code == 2 and f"{bad}: Object contains unknown field `isuers`" in err
    toml = tmp_path / "gateway.toml"
    toml.write_text('required_modes = ["bearer"]\n')
    monkeypatch.setenv("STREAMPROC_GATEWAY_LEEWAY_S", "9999")  # overrides the file's scalar
    code, _, err = run(capsys, "config", "check", str(toml))
    assert code == 2
    assert "leeway_s (env STREAMPROC_GATEWAY_LEEWAY_S): " in err and "<= 300" in err
    # A settings file with a gateway table is still a settings file.
    settings = tmp_path / "streamproc.toml"
    settings.write_text('[gateway]\nrequired_modes = ["bearer"]\n')
    monkeypatch.delenv("STREAMPROC_GATEWAY_LEEWAY_S")
    code, out, _ = run(capsys, "config", "check", str(settings))
    assert code == 0 and out.startswith(f"ok: {settings}\n") and "a gateway file" not in out
