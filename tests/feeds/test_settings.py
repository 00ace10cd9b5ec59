"""The ``[feeds]`` section as ``streamproc config check`` judges it: the poll interval's
bounds, tenants required with a directory, tenant ids; defaults that start a role with
nothing to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamproc.cli import main
from streamproc.feeds.settings import FeedsSettings, load


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str) -> tuple[int, str]:
    cfg = tmp_path / "feeds.toml"
    cfg.write_text(toml)
    code = main(["config", "check", str(cfg)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("interval", ["0.5", "86401", "-1"])
def test_the_poll_interval_is_bounded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], interval: str
) -> None:
    code, err = check(tmp_path, capsys, f"[feeds]\npoll_interval_s = {interval}\n")
    assert code == 2 and "feeds.poll_interval_s" in err, err


def test_a_directory_needs_tenants_and_tenants_are_tenant_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check(tmp_path, capsys, '[feeds]\nosv_dir = "/srv/osv"\n')
    assert code == 2 and "at least one tenant when feeds.osv_dir is set" in err, err
    code, err = check(tmp_path, capsys, '[feeds]\nosv_dir = "/srv/osv"\ntenants = ["ACME"]\n')
    assert code == 2 and "feeds.tenants" in err and "invalid tenant id 'ACME'" in err, err


def test_good_settings_pass_and_the_defaults_do_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = '[feeds]\nosv_dir = "/srv/osv"\ntenants = ["acme"]\npoll_interval_s = 1\n'
    code, err = check(tmp_path, capsys, toml)
    assert code == 0, err
    assert load({}) == FeedsSettings()
    assert FeedsSettings().osv_dir is None and FeedsSettings().poll_interval_s == 60.0
    got = load({"STREAMPROC_FEEDS_OSV_DIR": "/srv/osv", "STREAMPROC_FEEDS_TENANTS": "a,b"})
    assert got.tenants == ["a", "b"] and got.path("osv_dir") == Path("/srv/osv")


def test_no_webhook_source_may_take_the_feeds_roles_source_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = """
[[gateway.webhooks]]
name = "feeds"
kind = "feedser"
tenants = ["acme"]
hmac_secrets = ["0123456789abcdef0123456789abcdef"]
"""
    code, err = check(tmp_path, capsys, toml)
    assert code == 2 and "webhook source name 'feeds' is the feeds role's" in err, err
    code, err = check(tmp_path, capsys, toml.replace('name = "feeds"', 'name = "feedser"'))
    assert code == 0, err
