"""``streamproc config check/show`` and ``--config`` as a user runs them (in process, through
``streamproc.cli.main``), including a NATS server that demands a password from a file."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from streamproc.cli import main
from streamproc.natsd.server import EmbeddedNats, free_port


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_ok_prints_the_settings_with_secrets_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pw").write_text("hunter2-secret\n")
    (tmp_path / "hmac").write_text("webhook-secret\n")
    cfg = tmp_path / "ok.toml"
    cfg.write_text(
        f"""
[nats]
url = "nats://svc:url-secret@nats-1:4222,nats://nats-2:4222"
user = "svc"
password_file = "{tmp_path / "pw"}"
[planner]
default_rate = 75
[audit]
signing_key = "{"cd" * 32}"
[[gateway.webhooks]]
name = "feedser"
kind = "feedser"
tenants = ["acme"]
hmac_secrets = ["file:{tmp_path / "hmac"}"]
"""
    )
    monkeypatch.setenv("STREAMPROC_PLANNER_DEBOUNCE_S", "3")
    code, out, err = run(capsys, "config", "check", str(cfg))
    assert (code, err) == (0, "")
    assert out.startswith(f"ok: {cfg}\n")
    assert "default_rate = 75  # file" in out
    assert "debounce_s = 3.0  # env" in out
    assert 'password = "<redacted>"  # file (password_file)' in out
    assert "1 webhook source(s) (feedser (feedser → acme))" in out
    for secret in ("hunter2", "url-secret", "cd" * 32, "webhook-secret"):
        assert secret not in out
    # `show` gives every key and where it came from; STREAMPROC_CONFIG names the file.
    monkeypatch.setenv("STREAMPROC_CONFIG", str(cfg))
    code, out, err = run(capsys, "config", "show")
    assert code == 0
    assert "port = 4222  # default" in out and 'user = "svc"  # file' in out
    assert "url-secret" not in out and "hunter2" not in out


def test_check_names_each_bad_key_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(
        f"""
[nats]
ulr = "nats://x:4222"
tls_ca = "{tmp_path / "missing-ca.pem"}"
[runner]
ack_wait_s = 0
[audit]
signing_key = "not-a-seed"
trusted_keys = ["k1=bm90IGEga2V5"]
[otel]
endpoint = "ftp://collector"
[gateway]
issuer = "https://authority.test"
[[gateway.webhooks]]
name = "vexer"
kind = "vexer"
tenants = ["acme"]
ed25519_public_keys = ["{base64.b64encode(b"short").decode()}"]
"""
    )
    monkeypatch.setenv("STREAMPROC_PLANNER_DEFAULT_PARALLELISM", "0")
    code, out, err = run(capsys, "config", "check", str(cfg))
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert lines[0] == f"streamproc: {cfg}: 9 problem(s):"
    problems = {
        line.strip().partition(": ")[0]: line.strip().partition(": ")[2] for line in lines[1:]
    }
    assert problems["nats.ulr"] == "unknown key; did you mean nats.url or nats.user?"
    assert problems["planner.default_parallelism (env STREAMPROC_PLANNER_DEFAULT_PARALLELISM)"] == (
        "0 is below the minimum 1"
    )
    assert problems["runner.ack_wait_s"] == "runner settings: Expected `float` > 0.0"
    assert problems["audit.signing_key"] == "seed is neither 64 hex digits nor standard base64"
    assert problems["audit.trusted_keys"].startswith("trusted key 'k1'")
    assert problems["nats.tls_ca"].startswith(f"cannot read {tmp_path / 'missing-ca.pem'}")
    assert problems["gateway.issuer_key"] == "gateway.issuer and gateway.issuer_key go together"
    assert problems["gateway.webhooks[0] (vexer)"].startswith("an Ed25519 key is 32 bytes")
    assert problems["otel.endpoint"] == "an http(s) URL of an OTLP/HTTP receiver"
    assert len(problems) == 9
    # Without a file: STREAMPROC_CONFIG, else a usage error.
    code, _, err = run(capsys, "config", "check")
    assert code == 2 and "needs FILE" in err


def test_running_commands_read_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "from-file"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[node]\ndata_dir = "{data}"\n')
    code, _, err = run(capsys, "state", "digest", "--role", "activity", "--config", str(cfg))
    assert code == 2 and f"{data}/state/activity is not a state directory" in err
    monkeypatch.setenv("STREAMPROC_CONFIG", str(cfg))
    code, _, err = run(capsys, "state", "digest", "--role", "activity")
    assert code == 2 and str(data) in err
    cfg.write_text("[node]\ndata_dri = 1\n")  # a broken file stops every command, named
    code, _, err = run(capsys, "state", "digest", "--role", "activity")
    assert code == 2
    assert "node.data_dri: unknown key; did you mean node.data_dir" in err


def test_streams_apply_with_a_password_from_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = 'authorization { user: svc, password: "pw-from-file" }\n'
    srv = EmbeddedNats(tmp_path / "nats", port=free_port(), extra_config=auth).start()
    try:
        (tmp_path / "pw").write_text("pw-from-file\n")
        cfg = tmp_path / "c.toml"
        cfg.write_text(
            f'[nats]\nurl = "{srv.url}"\nprefix = "cfgauth"\nuser = "svc"\n'
            f'password_file = "{tmp_path / "pw"}"\n'
        )
        code, out, err = run(capsys, "streams", "apply", "--replicas", "1", "--config", str(cfg))
        assert code == 0, err
        assert "CFGAUTH" in out and "created" in out
        monkeypatch.setenv("STREAMPROC_NATS_PASSWORD", "wrong")  # the environment wins
        code, _, err = run(capsys, "streams", "apply", "--replicas", "1", "--config", str(cfg))
        assert code == 2 and "Authorization Violation" in err
    finally:
        srv.stop()


def test_check_names_bad_notify_and_client_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the typed bounds cannot see: the retention's pair, the consumer's tenants and
    URLs (each checked by the reader that uses it)."""
    cfg = tmp_path / "notify.toml"
    cfg.write_text(
        """
[notify]
max_age_s = 7200
max_retention_s = 3600
tenants = ["acme", "ACME"]
base_url = "http://user:pw@feed.internal"
[client]
token_url = "https://authority.internal/token?x=1"
"""
    )
    code, out, err = run(capsys, "config", "check", str(cfg))
    assert (code, out) == (2, ""), err
    assert "notify.max_retention_s: at least the delivery window" in err
    assert "notify.tenants: tenant acme is listed twice" in err
    assert "notify.base_url" in err and "without credentials" in err
    assert "client.token_url" in err and "query" in err
