"""Browser tests (marker ``ui``) run only when asked: ``pytest tests/console -m ui`` (what
``make test-ui`` does) or ``STREAMPROC_UI_TESTS=1``; ``make test`` skips them."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ui: headless-Chromium browser tests (make test-ui)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    asked = "ui" in (config.getoption("markexpr", "") or "") or os.environ.get(
        "STREAMPROC_UI_TESTS"
    ) in ("1", "true", "yes")
    if asked:
        return
    skip = pytest.mark.skip(reason="browser test: run with `make test-ui` (pytest -m ui)")
    for item in items:
        if item.get_closest_marker("ui") is not None:
            item.add_marker(skip)
