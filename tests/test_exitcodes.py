"""The exit codes scripts and supervisors rely on stay what they are, and every error the table
names still exists."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from streamproc import exitcodes
from streamproc.cli import main
from streamproc.config import ConfigError
from streamproc.configfile.loader import ConfigFileError

CODES = {
    "OK": 0,
    "FAILED": 1,
    "USAGE": 2,
    "DRIFT": 3,
    "FAIL_CLOSED": 3,
    "INTERRUPTED": 130,
    "BROKEN_PIPE": 141,
}

ERRORS = {
    "streamproc.config.ConfigError": 2,
    "streamproc.runtime.app.ListenError": 2,
    "streamproc.bus.connect.NatsConnectError": 2,
    "streamproc.bus.connect.NatsVersionError": 2,
    "streamproc.bus.jsapi.JsApiError": 2,
    "streamproc.natsd.owner.NatsServerError": 2,
    "streamproc.runtime.lease.LeaseError": 2,
    "streamproc.runtime.projection.StateFormatError": 2,
    "streamproc.runtime.position.PositionError": 2,
    "streamproc.state.store.StateLocked": 2,
    "streamproc.audit.common.UsageError": 2,
    "streamproc.notify.consumer.ConsumerConflict": 2,
    "streamproc.notify.feed_consumer.FeedRefused": 2,
    "streamproc.notify.feed_consumer.FeedClosed": 3,
    "streamproc.notify.feed_consumer.FeedUnavailable": 1,
    "streamproc.notify.feed_consumer.PartitionFailed": 1,
    "streamproc.bus.pull.ConsumerGone": 1,
    "streamproc.client.http.Unreachable": 1,
    "streamproc.client.tokens.TokenUnavailable": 1,
    "nats.errors.ConnectionClosedError": 1,
    "streamproc.gateway.tokens_cli.KeyFileError": 1,
}
"""The codes as documented in docs/operations.md#exit-codes: changing one is a decision."""


def test_codes_are_unchanged() -> None:
    assert {name: getattr(exitcodes, name) for name in CODES} == CODES


def test_errors_map_to_unchanged_codes() -> None:
    assert exitcodes.ERRORS == ERRORS


@pytest.mark.parametrize("name", list(ERRORS))
def test_every_named_error_exists(name: str) -> None:
    module, _, cls = name.rpartition(".")
    found = getattr(importlib.import_module(module), cls, None)
    assert isinstance(found, type) and issubclass(found, Exception), (
        f"{name} is gone: rename it here"
    )
    assert exitcodes.code_for(found.__new__(found)) == ERRORS[name]


def test_a_subclass_takes_its_base_code_and_a_bug_has_none() -> None:
    assert exitcodes.code_for(ConfigFileError.__new__(ConfigFileError)) == exitcodes.USAGE
    assert exitcodes.code_for(ValueError("a bug")) is None
    with pytest.raises(KeyError, match="ValueError is not in"):
        exitcodes.known(ValueError("a bug"))


def test_guarded_reports_known_errors_and_lets_bugs_through(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def refuse(_: object) -> int:
        raise ConfigError("no such key")

    assert exitcodes.guarded(refuse)(None) == exitcodes.USAGE
    assert capsys.readouterr().err == "streamproc: no such key\n"

    def crash(_: object) -> int:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        exitcodes.guarded(crash)(None)


def test_commands_end_with_the_documented_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through ``streamproc``'s own entry point, one command per table row that needs no NATS."""
    key = tmp_path / "issuer.json"
    assert main(["token", "keygen", "--out", str(key)]) == 0
    assert main(["token", "keygen", "--out", str(key)]) == 2  # exists, no --force
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["token", "issue", "--key", str(bad), "--tenant", "t1"]) == 1
    assert "bad.json is not a key file from `token keygen`" in capsys.readouterr().err
    assert main(["state", "digest", "--path", str(tmp_path / "none")]) == 2
    broken = tmp_path / "broken.toml"
    broken.write_text("[nats]\nno_such_key = 1\n")
    assert main(["config", "check", str(broken)]) == 2
    two_kinds = ["--kind", "rescan.delta", "--kind", "report.ready"]
    assert main(["notify", "tail", "--http", "http://127.0.0.1:1", *two_kinds]) == 2
