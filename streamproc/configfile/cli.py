"""``streamproc config check | show | reference``.

Registered by :mod:`streamproc.cli` with ``register(sub, _common)``; ``_common`` gives the
running commands their ``--config`` flag (see :func:`streamproc.cliargs.add_config_flag`).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from streamproc import exitcodes
from streamproc.cliargs import add_config_flag
from streamproc.cliargs import configuration as configuration_of
from streamproc.configfile.checks import check_all, check_gateway_file, is_gateway_file
from streamproc.configfile.loader import (
    ConfigFileError,
    Loaded,
    Problem,
    config_path,
    configuration,
    environ,
    load,
)
from streamproc.configfile.reference import render_reference
from streamproc.configfile.registry import CONFIG_ENV, KEYS, SECTIONS, Key, known_env
from streamproc.configfile.typed import ValueProblem, from_env
from streamproc.configfile.values import display
from streamproc.gateway.settings import ENV_FILE, GatewayConfigError
from streamproc.gateway.settings import load as load_gateway


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    cfg = subparsers.add_parser("config", help="the settings file: check, show, reference")
    csub = cfg.add_subparsers(dest="config_command", required=True)
    p = csub.add_parser(
        "check", help="validate a settings file with the environment; name each bad key"
    )
    p.add_argument("file", nargs="?", help=f"the TOML file (default ${CONFIG_ENV})")
    p.add_argument("--quiet", action="store_true", help="print only problems")
    p.set_defaults(fn=cmd_check)
    p = csub.add_parser("show", help="every effective setting and where it came from")
    add_config_flag(p)
    p.set_defaults(fn=cmd_show, typed_settings=False)  # shows a bad value, not refuses it
    p = csub.add_parser("reference", help="write the Markdown reference of every key")
    p.add_argument("--out", help="write here (default: standard output)")
    p.set_defaults(fn=cmd_reference)


# ---------------------------------------------------------------------- commands


def cmd_check(args: argparse.Namespace) -> int:
    path = config_path(args.file)
    if path is None:
        print(f"streamproc: config check needs FILE (or {CONFIG_ENV})", file=sys.stderr)
        return exitcodes.USAGE
    if is_gateway_file(Path(path)):
        return _check_gateway_file(path, quiet=args.quiet)
    loaded = load(path)
    problems = list(loaded.problems)
    if not any(p.key == path for p in problems):  # the file parsed: check what it says
        problems += check_all(_merged(loaded), loaded.file.documents)
    _warn_unknown_env()
    if problems:
        err = ConfigFileError(path, [loaded.label(p) for p in _unique(problems)])
        print(f"streamproc: {err}", file=sys.stderr)
        return exitcodes.USAGE
    print(f"ok: {path}")
    if not args.quiet:
        for line in _settings_lines(loaded, only_set=True):
            print(f"  {line}")
        summary = _gateway_summary(loaded.file.documents.get("gateway"), _merged(loaded))
        if summary:
            print(f"  # gateway: {summary}")
    return 0


def _check_gateway_file(path: str, *, quiet: bool) -> int:
    """A gateway file: checked as the gateway loads it (``gateway.config``)."""
    env = environ()
    problems = check_gateway_file(path, env)
    _warn_unknown_env()
    if problems:
        print(f"streamproc: {ConfigFileError(path, _unique(problems))}", file=sys.stderr)
        return exitcodes.USAGE
    print(f"ok: {path} (a gateway file, for gateway.config / {ENV_FILE})")
    if not quiet:
        print(f"  # gateway: {_gateway_summary({}, {**env, ENV_FILE: path})}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """The command line has read the settings already (``--config``): show them, and where
    each came from."""
    conf = configuration_of(args)
    loaded = load(config_path(args.config))
    print(f"# streamproc settings; file: {config_path(args.config) or 'none'}")
    for line in _settings_lines(loaded, only_set=False):
        print(line)
    summary = _gateway_summary(conf.document("gateway"), conf.values)
    if summary:
        print(f"# gateway: {summary}")
    _warn_unknown_env()
    return 0


def cmd_reference(args: argparse.Namespace) -> int:
    text = render_reference()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        print(args.out)
    else:
        sys.stdout.write(text)
    return 0


# ---------------------------------------------------------------------- output


def _merged(loaded: Loaded) -> dict[str, str]:
    """The environment (set variables) over the file's values, as the readers see them (the
    process's :class:`~streamproc.config.Configuration` of them)."""
    return dict(configuration(loaded, environ()).values)


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def _effective(key: Key, env: Mapping[str, str]) -> object:
    text = env.get(key.env)
    if not text:
        return key.default
    try:
        return from_env(key, text)
    except ValueProblem:
        return text


def _settings_lines(loaded: Loaded, *, only_set: bool) -> list[str]:
    """``[section]`` and ``name = value  # source`` lines (TOML, secrets redacted)."""
    env = _merged(loaded)
    lines: list[str] = []
    for section in SECTIONS:
        rows = []
        for key in (k for k in KEYS if k.section == section):
            source = loaded.source(key)
            if only_set and source == "default":
                continue
            value = _effective(key, env)
            if value is None:
                rows.append(f"# {key.name}: unset ({key.default_text or 'none'})")
            else:
                rows.append(f"{key.name} = {display(key, value)}  # {source}")
        if rows:
            lines += ([""] if lines and not only_set else []) + [f"[{section}]", *rows]
    return lines


def _gateway_summary(document: Mapping[str, Any] | None, env: Mapping[str, str]) -> str:
    """Issuers and webhook sources in effect (the tables and any gateway file), no secrets."""
    keys = {k.env: env[k.env] for k in KEYS if k.path.startswith("gateway.") and env.get(k.env)}
    if not keys and not document:
        return ""
    try:
        s = load_gateway(keys, document=document or {})
    except GatewayConfigError:
        return "(not loadable)"
    sources = ", ".join(f"{w.name} ({w.kind} → {', '.join(w.tenants)})" for w in s.webhooks)
    issuers = ", ".join(f"{i.issuer} → {', '.join(i.tenants or ())}" for i in s.issuers)
    parts = [
        f"{len(s.issuers)} issuer(s) ({issuers or '-'})",
        f"{len(s.webhooks)} webhook source(s) ({sources or '-'})",
        f"modes {', '.join(s.required_modes)}",
    ]
    if s.tls is not None:
        parts.append(f"TLS listener {s.tls.host}:{s.tls.port}")
    return "; ".join(parts)


def _warn_unknown_env() -> None:
    """A mistyped ``STREAMPROC_*`` variable is otherwise silently ignored."""
    known = known_env()
    for name in sorted(os.environ):
        if name.startswith("STREAMPROC_") and name not in known and os.environ[name]:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]}?" if close else ""
            print(f"streamproc: warning: {name} is not a streamproc setting{hint}", file=sys.stderr)
