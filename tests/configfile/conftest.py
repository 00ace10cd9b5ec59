"""Each test starts without a config file installed and without streamproc variables in the
environment (a developer's shell may have some), and leaves none behind."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from streamproc.configfile import reset


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("STREAMPROC_") or name == "NATS_URL":
            monkeypatch.delenv(name)
    reset()
    yield
    reset()
