"""The config file as the readers see it: file values under environment names, environment
variables over them, secrets from files, unknown keys and bad types named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamproc import config
from streamproc.configfile.loader import ConfigFileError, activate, read_file
from streamproc.gateway import settings as gateway
from streamproc.planner import settings as planner
from streamproc.runner import settings as runner


def write(tmp_path: Path, text: str, name: str = "streamproc.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(path: Path) -> dict[str, str]:
    return {p.key: p.reason for p in read_file(path).problems}


def test_file_values_reach_every_reader_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        """
[node]
id = "node-a"
data_dir = "/srv/streamproc"
[nats]
url = ["nats://a:4222", "nats://b:4222"]
prefix = "sched"
[planner]
debounce_s = 5
default_parallelism = 4
usage_only = false
[runner]
retry_backoff_s = [0.5, 2]
""",
    )
    monkeypatch.setenv("STREAMPROC_PLANNER_DEFAULT_PARALLELISM", "16")
    monkeypatch.setenv("STREAMPROC_PREFIX", "")  # empty = unset: does not hide the file's
    conf = activate(path)
    s = config.load(configuration=conf)
    assert (s.node_id, s.data_dir, s.prefix) == ("node-a", Path("/srv/streamproc"), "sched")
    assert s.nats_url == "nats://a:4222,nats://b:4222"
    assert s.configuration is conf  # what the roles started with these settings read
    p = conf.section(planner.load)
    assert (p.debounce_s, p.default_parallelism, p.usage_only) == (5.0, 16, False)
    assert conf.section(planner.load) is p  # decoded once
    assert runner.load(conf.values).retry_backoff_s == [0.5, 2.0]
    assert config.load({"prefix": "flag"}, conf).prefix == "flag"  # flags over both
    # Read once: a variable set afterwards changes nothing for this process.
    monkeypatch.setenv("STREAMPROC_PLANNER_DEFAULT_PARALLELISM", "32")
    assert planner.load(conf.values).default_parallelism == 16


def test_activate_uses_STREAMPROC_CONFIG(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMPROC_CONFIG", str(write(tmp_path, '[node]\nid = "from-env"\n')))
    assert config.load(configuration=activate(None)).node_id == "from-env"


def test_secrets_come_from_files_trimmed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pw").write_text("  hunter2\n")
    (tmp_path / "seed").write_text("ab" * 32 + "\n")
    path = write(
        tmp_path,
        f"""
[nats]
user = "svc"
password_file = "{tmp_path / "pw"}"
[audit]
signing_key_file = "{tmp_path / "seed"}"
""",
    )
    env = activate(path).values
    assert env["STREAMPROC_NATS_PASSWORD"] == "hunter2"
    assert env["STREAMPROC_AUDIT_SIGNING_KEY"] == "ab" * 32
    # An environment *_FILE beats the file; a direct variable beats both.
    (tmp_path / "pw2").write_text("from-env-file")
    monkeypatch.setenv("STREAMPROC_NATS_PASSWORD_FILE", str(tmp_path / "pw2"))
    assert activate(path).values["STREAMPROC_NATS_PASSWORD"] == "from-env-file"
    monkeypatch.setenv("STREAMPROC_NATS_PASSWORD", "direct")
    with pytest.raises(ConfigFileError, match="STREAMPROC_NATS_PASSWORD_FILE: set"):
        activate(path)  # both the variable and its _FILE: ambiguous
    monkeypatch.delenv("STREAMPROC_NATS_PASSWORD_FILE")
    assert activate(path).values["STREAMPROC_NATS_PASSWORD"] == "direct"


def test_bad_secret_files_name_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").write_text("\n")
    path = write(
        tmp_path,
        f"""
[nats]
token_file = "{tmp_path / "missing"}"
password = "x"
password_file = "{tmp_path / "empty"}"
[feedser]
secret_file = "{tmp_path / "empty"}"
[notify]
token_file = 5
""",
    )
    found = problems(path)
    assert found["nats.token_file"].startswith(f"cannot read {tmp_path / 'missing'}")
    assert found["nats.password"] == "give nats.password or nats.password_file, not both"
    assert found["feedser.secret_file"] == f"{tmp_path / 'empty'} is empty"
    assert found["notify.token_file"] == "expected a file path, got 5"
    monkeypatch.setenv("STREAMPROC_NOTIFY_TOKEN_FILE", str(tmp_path / "nope"))
    with pytest.raises(
        ConfigFileError, match=r"STREAMPROC_NOTIFY_TOKEN_FILE \(notify.token_file\)"
    ):
        activate(None)


def test_unknown_keys_get_suggestions(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
data_dir = "x"
[nats]
ulr = "nats://x"
[planer]
debounce_s = 1
[gateway.dpop]
nonce_secret_fil = "x"
[zzz]
""",
    )
    assert problems(path) == {
        "data_dir": "unknown key; did you mean node.data_dir?",
        "nats.ulr": "unknown key; did you mean nats.url or nats.user?",
        "planer": "unknown key; did you mean planner or scanner?",
        "gateway.dpop.nonce_secret_fil": (
            "unknown key; did you mean gateway.dpop.nonce_secret_file or gateway.dpop.nonce_secret?"
        ),
        "zzz": "unknown key",
    }


def test_a_renamed_key_names_the_key_it_became(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "[planner]\ndefault_max_jobs = 100\n")
    assert problems(path) == {
        "planner.default_max_jobs": "renamed: it is planner.max_jobs_per_run now"
    }
    monkeypatch.setenv("STREAMPROC_PLANNER_DEFAULT_MAX_JOBS", "100")
    with pytest.raises(config.ConfigError, match="is now STREAMPROC_PLANNER_MAX_JOBS_PER_RUN"):
        planner.load(activate(None).values)


def test_bad_types_and_bounds_name_the_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
node = "x"
[nats]
port = 70000
url = 4222
[planner]
default_rate = "fast"
debounce_s = true
missed_ticks = "some"
[runner]
retry_backoff_s = ["1"]
[gateway]
required_modes = ["dpop", "magic"]
[audit]
verify_on_start = "yes"
""",
    )
    assert problems(path) == {
        "node": "expected a table ([node])",
        "nats.port": "70000 is above the maximum 65535",
        "nats.url": (
            "expected an array of strings (or one comma-separated string), got an integer 4222"
        ),
        "planner.default_rate": "expected an integer, got a string 'fast'",
        "planner.debounce_s": "expected a number, got a boolean True",
        "planner.missed_ticks": "'some' is not one of latest, none, all-capped",
        "runner.retry_backoff_s": "expected an array of numbers, got an array ['1']",
        "gateway.required_modes": "'magic' is not one of bearer, dpop, mtls",
        "audit.verify_on_start": "expected true or false, got a string 'yes'",
    }


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    bad = write(tmp_path, "[nats\nurl = 1\n")
    assert list(problems(bad)) == [str(bad)]
    assert "not valid TOML" in problems(bad)[str(bad)]
    with pytest.raises(ConfigFileError, match="cannot read: No such file"):
        activate(tmp_path / "absent.toml")


GATEWAY_TABLES = """
[gateway]
required_modes = ["bearer"]
[gateway.dpop]
nonce_ttl_s = 120
[[gateway.issuers]]
issuer = "https://authority.test"
tenants = ["acme"]
keys = [{ kid = "k1", public_key = "%s" }]
[[gateway.webhooks]]
name = "feedser"
kind = "feedser"
tenants = ["acme"]
hmac_secrets = ["file:%s"]
"""


def test_gateway_tables_with_the_gateway_file_over_them(tmp_path: Path) -> None:
    from streamproc.gateway.auth.webhooks import Source

    (tmp_path / "hmac").write_text("shared-secret\n")
    path = write(tmp_path, GATEWAY_TABLES % ("A" * 43, tmp_path / "hmac"))
    conf = activate(path)
    s = gateway.configured(conf)
    assert [i.issuer for i in s.issuers] == ["https://authority.test"]
    assert (s.required_modes, s.dpop.nonce_ttl_s) == (["bearer"], 120)
    assert Source(s.webhooks[0], conf.values).hmac_keys == [b"shared-secret"]  # file: reference
    # A STREAMPROC_GATEWAY_CONFIG file replaces the tables it names, keeps the others.
    other = {
        "webhooks": [{"name": "vexer", "kind": "vexer", "tenants": ["a"], "hmac_secrets": ["x"]}]
    }
    (tmp_path / "gw.json").write_text(json.dumps(other))
    s = gateway.load(
        {"STREAMPROC_GATEWAY_CONFIG": str(tmp_path / "gw.json")}, conf.document("gateway")
    )
    assert [w.name for w in s.webhooks] == ["vexer"]
    assert [i.issuer for i in s.issuers] == ["https://authority.test"]


def test_gateway_tables_are_checked_by_the_gateway_types(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[[gateway.webhooks]]
name = "feedser"
kind = "feedser"
tenants = ["Not A Tenant"]
hmac_secrets = ["x"]
[[gateway.webhooks]]
name = "vexer"
kind = "vex"
tenants = ["a"]
[gateway.tls]
cert_file = "c.pem"
""",
    )
    assert problems(path) == {
        "gateway.webhooks[0]": "webhook source feedser: invalid tenant 'Not A Tenant'",
        "gateway.webhooks[1].kind": "Invalid enum value 'vex'",
        "gateway.tls": "Object missing required field `key_file`",
    }


def test_the_core_settings_come_from_the_typed_sections() -> None:
    values = {
        "STREAMPROC_DATA_DIR": "/srv/sp", "STREAMPROC_HTTP_PORT": "9000",
        "STREAMPROC_HLC_RESERVE_MS": "250", "NATS_URL": "nats://a:4222, nats://b:4222",
    }  # fmt: skip
    s = config.load(configuration=config.Configuration(values=values))
    assert (str(s.data_dir), s.http_port, s.hlc_reserve_ms) == ("/srv/sp", 9000, 250)
    assert s.nats_url == "nats://a:4222, nats://b:4222"  # as given: connect splits it
    assert config.load({"http_port": 1}, config.Configuration(values=values)).http_port == 1
    assert config.load() == config.Settings(node_id=config.load().node_id)
