"""Runner settings: the scanner the runner calls."""

from __future__ import annotations

from streamproc.runner.settings import load


def test_the_scanner_url_or_up_demos_scanner_port() -> None:
    assert load(env={}).scanner_url == "http://127.0.0.1:8490"
    port = {"STREAMPROC_SCANNER_PORT": "9123"}
    assert load(env=port).scanner_url == "http://127.0.0.1:9123"  # up --demo's, moved
    url = {"STREAMPROC_SCANNER_URL": "http://scanner.internal:8080"}
    assert load(env={**port, **url}).scanner_url == "http://scanner.internal:8080"


def test_a_given_url_wins_even_when_it_is_the_default() -> None:
    """The typed section cannot tell an unset URL from its default: whether it was given is
    taken from the settings' text."""
    env = {"STREAMPROC_SCANNER_URL": "http://127.0.0.1:8490", "STREAMPROC_SCANNER_PORT": "9123"}
    assert load(env=env).scanner_url == "http://127.0.0.1:8490"


def test_a_tools_settings_come_from_its_kinds_table() -> None:
    env = {
        "STREAMPROC_SCANNER_KIND": "trivy",
        "STREAMPROC_SCANNER_TRIVY_ARGS": "--skip-db-update --severity 'HIGH,CRITICAL'",
        "STREAMPROC_SCANNER_TRIVY_SERVER": "http://trivy:4954",
        "STREAMPROC_SCANNER_GRYPE_PATH": "/not/used",
    }
    tool = load(env=env).scanner.tool
    assert tool is not None
    assert (tool.path, tool.args, tool.server, tool.concurrency) == (
        "trivy", ["--skip-db-update", "--severity", "HIGH,CRITICAL"], "http://trivy:4954", 2,
    )  # fmt: skip
    assert load(env={}).scanner.tool is None
