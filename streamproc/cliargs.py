"""The options every ``streamproc`` subcommand shares, and the settings they give.

:mod:`streamproc.cli` and the subcommand modules it registers (``audit/cli.py``,
``impact/cli.py``, ``role_cli.py``, …) both use these, so they live below both.
"""

from __future__ import annotations

import argparse

from streamproc.config import Configuration, Settings, load
from streamproc.configfile.registry import CONFIG_ENV
from streamproc.names import DEFAULT_PREFIX

OPS_PORT_HELP = (
    "serve /metrics on this port of STREAMPROC_OPS_HOST (127.0.0.1), never on the API's "
    "(default: STREAMPROC_OPS_PORT; unset: no metrics)"
)


def add_config_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help=f"settings file (TOML; default ${CONFIG_ENV})")


def common(p: argparse.ArgumentParser) -> None:
    """Where the data, the NATS server and the subjects are; the settings file."""
    p.add_argument("--data-dir", help="local data directory (default ./data, STREAMPROC_DATA_DIR)")
    p.add_argument("--nats-url", help="use this NATS server instead of the embedded one (NATS_URL)")
    p.add_argument("--prefix", help=f"subject prefix (default {DEFAULT_PREFIX})")
    p.add_argument("--node-id", help="HLC node id (default: host name)")
    add_config_flag(p)


def settings(args: argparse.Namespace) -> Settings:
    """The settings, with what the command line gave taking precedence."""
    overrides = {
        "data_dir": getattr(args, "data_dir", None),
        "nats_url": getattr(args, "nats_url", None),
        "nats_port": getattr(args, "nats_port", None),
        "http_port": getattr(args, "http_port", None),
        "ops_port": getattr(args, "ops_port", None),
        "prefix": getattr(args, "prefix", None),
        "node_id": getattr(args, "node_id", None),
    }
    return load(overrides, configuration(args))


def configuration(args: argparse.Namespace) -> Configuration:
    """The process's settings, read once by the command line before the command ran
    (``args.configuration``); the defaults alone for a namespace built without it (tests)."""
    found = getattr(args, "configuration", None)
    return found if isinstance(found, Configuration) else Configuration()
