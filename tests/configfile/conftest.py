"""Each test starts without streamproc variables in the environment (a developer's shell may
have some), and leaves none behind (nothing else is process-wide: every configuration is read
by the call that needs it)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("STREAMPROC_") or name == "NATS_URL":
            monkeypatch.delenv(name)
    yield
