"""What the audit commands share: settings from flags, the state directory, keys, exits."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from streamproc.audit.dsse import Keyring
from streamproc.audit.layout import HEADS_CF
from streamproc.audit.signing import build_keyring
from streamproc.cliargs import configuration
from streamproc.config import Settings, load
from streamproc.state.settings import sizes_from
from streamproc.state.store import RocksStore

AUDITOR_ROLE = "auditor"


class UsageError(Exception):
    """A problem with the command line or the environment: exit code 2."""


def settings_from_args(args: argparse.Namespace) -> Settings:
    return load(
        {
            "data_dir": getattr(args, "data_dir", None),
            "nats_url": getattr(args, "nats_url", None),
            "prefix": getattr(args, "prefix", None),
            "node_id": getattr(args, "node_id", None),
        },
        configuration(args),
    )


def state_dir(args: argparse.Namespace, settings: Settings) -> Path:
    return Path(args.state_dir) if args.state_dir else settings.state_dir(AUDITOR_ROLE)


@contextmanager
def open_state(path: Path, settings: Settings) -> Iterator[RocksStore]:
    """The auditor's state, read-only (a point-in-time view beside a running auditor)."""
    if not (path / "CURRENT").exists():
        raise UsageError(
            f"no auditor state in {path}: run the auditor role first, or pass --state-dir"
        )
    store = RocksStore(path, read_only=True, sizes=settings.configuration.built(sizes_from))
    try:
        if HEADS_CF not in store.families():
            raise UsageError(f"{path} holds no audit log (is it the auditor's state?)")
        yield store
    finally:
        store.close()


def keyring_from_args(args: argparse.Namespace, settings: Settings | None) -> Keyring:
    """``--trusted-key`` flags, ``STREAMPROC_AUDIT_TRUSTED_KEYS`` and this data directory's
    own key."""
    return build_keyring(
        settings.data_dir if settings is not None else None,
        env=settings.configuration.values if settings is not None else {},
        extra=getattr(args, "trusted_key", None) or (),
    )
