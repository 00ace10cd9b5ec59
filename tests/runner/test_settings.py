"""Runner settings: the scanner the runner calls."""

from __future__ import annotations

from streamproc.runner.settings import load


def test_the_scanner_url_or_up_demos_scanner_port() -> None:
    assert load(env={}).scanner_url == "http://127.0.0.1:8490"
    port = {"STREAMPROC_SCANNER_PORT": "9123"}
    assert load(env=port).scanner_url == "http://127.0.0.1:9123"  # up --demo's, moved
    url = {"STREAMPROC_SCANNER_URL": "http://scanner.internal:8080"}
    assert load(env={**port, **url}).scanner_url == "http://scanner.internal:8080"
