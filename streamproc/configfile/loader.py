"""Reading a config file: every key checked against the registry (unknown names get a
"did you mean"), values typed, secrets read from ``<key>_file`` files, the gateway's tables
validated by the gateway's own types. :func:`activate` makes the process's one
:class:`streamproc.config.Configuration` of it, environment variables over the file."""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from streamproc.config import ConfigError, Configuration
from streamproc.configfile.registry import (
    BY_PATH,
    CONFIG_ENV,
    DOCS_BY_PATH,
    KEYS,
    RENAMED,
    SECRET_FILES,
    SECTIONS,
    Key,
    all_paths,
)
from streamproc.configfile.typed import SectionProblems, ValueProblem, decode
from streamproc.configfile.values import from_toml
from streamproc.gateway.settings import Issuer, Tls, WebhookSource


@dataclass(frozen=True)
class Problem:
    key: str
    """A config-file key (``nats.url``), an environment variable, or a section."""
    reason: str

    def __str__(self) -> str:
        return f"{self.key}: {self.reason}"


class ConfigFileError(ConfigError):
    """The config (file or environment) has problems; each names its key."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s):\n{lines}")


@dataclass
class Layer:
    """What one source (a file, or the environment's ``*_FILE`` secrets) contributes."""

    path: Path | None = None
    values: dict[str, str] = field(default_factory=dict)
    """Environment name → value."""
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Section → structured keys (``gateway`` → ``{"webhooks": [...]}``)."""
    secret_files: dict[str, str] = field(default_factory=dict)
    """Environment name → the file its secret value was read from."""
    problems: list[Problem] = field(default_factory=list)


_DOC_TYPES: dict[str, Any] = {
    "gateway.issuers": list[Issuer],
    "gateway.webhooks": list[WebhookSource],
    "gateway.tls": Tls,
}


def suggest(path: str) -> str:
    """``unknown key``, with the nearest known names (or the key it was renamed to)."""
    if path in RENAMED:
        return f"renamed: it is {RENAMED[path]} now"
    name = path.rpartition(".")[2]
    same_name = [p for p in all_paths() if p.rpartition(".")[2] == name and p != path]
    close = same_name or difflib.get_close_matches(path, all_paths(), n=2, cutoff=0.6)
    return f"unknown key; did you mean {' or '.join(close)}?" if close else "unknown key"


def read_secret(path: str) -> str:
    """A secret file's content, whitespace-trimmed; :class:`ValueProblem` if unusable."""
    p = Path(path).expanduser()
    try:
        text = p.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ValueProblem(f"cannot read {p}: {reason}") from None
    if not text:
        raise ValueProblem(f"{p} is empty")
    return text


def _msgspec_problem(base: str, exc: msgspec.ValidationError) -> Problem:
    message, sep, where = str(exc).rpartition(" - at `")
    if not sep:
        return Problem(base, str(exc))
    return Problem(base + where.rstrip("`").removeprefix("$"), message)


def _doc_problems(path: str, value: object) -> list[Problem]:
    """Each item of an array of tables on its own, so every bad item is named."""
    tp = _DOC_TYPES[path]
    items = [(path, value, tp)]
    if isinstance(value, list) and getattr(tp, "__origin__", None) is list:
        items = [(f"{path}[{i}]", v, tp.__args__[0]) for i, v in enumerate(value)]
    out = []
    for where, item, item_type in items:
        try:
            msgspec.convert(item, item_type)
        except msgspec.ValidationError as exc:
            out.append(_msgspec_problem(where, exc))
    return out


def _is_section(path: str) -> bool:
    return path in SECTIONS or any(p.startswith(path + ".") for p in all_paths())


def _walk(table: Mapping[str, Any], prefix: str, layer: Layer) -> None:
    for name, value in table.items():
        path = f"{prefix}{name}"
        if path in BY_PATH:
            key = BY_PATH[path]
            if key.secret and f"{name}_file" in table:
                layer.problems.append(Problem(path, f"give {path} or {key.file_path}, not both"))
                continue
            try:
                layer.values[key.env] = from_toml(key, value)
            except ValueProblem as exc:
                layer.problems.append(Problem(path, str(exc)))
        elif path in SECRET_FILES:
            key = SECRET_FILES[path]
            if not isinstance(value, str):
                layer.problems.append(Problem(path, f"expected a file path, got {value!r}"))
                continue
            try:
                layer.values[key.env] = read_secret(value)
                layer.secret_files[key.env] = value
            except ValueProblem as exc:
                layer.problems.append(Problem(path, str(exc)))
        elif path in DOCS_BY_PATH:
            found = _doc_problems(path, value)
            if found:
                layer.problems += found
                continue
            section, _, key_name = path.rpartition(".")
            layer.documents.setdefault(section, {})[key_name] = value
        elif _is_section(path):
            if not isinstance(value, dict):
                layer.problems.append(Problem(path, "expected a table ([" + path + "])"))
            else:
                _walk(value, path + ".", layer)
        else:
            layer.problems.append(Problem(path, suggest(path)))


def read_file(path: str | Path) -> Layer:
    """Parse and check ``path``; problems are collected, not raised."""
    layer = Layer(path=Path(path))
    try:
        doc = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        layer.problems.append(Problem(str(path), f"cannot read: {exc.strerror}"))
        return layer
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        layer.problems.append(Problem(str(path), f"not valid TOML: {exc}"))
        return layer
    _walk(doc, "", layer)
    return layer


def env_secret_files(environ: Mapping[str, str]) -> Layer:
    """Secrets named by ``<ENV>_FILE`` variables (they win over the config file)."""
    layer = Layer()
    for key in KEYS:
        name = environ.get(key.file_env, "")
        if not key.secret or not name:
            continue
        if environ.get(key.env):
            layer.problems.append(Problem(key.file_env, f"set {key.env} or {key.file_env}"))
            continue
        try:
            layer.values[key.env] = read_secret(name)
            layer.secret_files[key.env] = name
        except ValueProblem as exc:
            layer.problems.append(Problem(f"{key.file_env} ({key.path}_file)", str(exc)))
    return layer


@dataclass
class Loaded:
    """The config file (if any) and the environment's secret files, merged."""

    file: Layer
    env_files: Layer

    @property
    def problems(self) -> list[Problem]:
        return self.file.problems + self.env_files.problems

    @property
    def values(self) -> dict[str, str]:
        return {**self.file.values, **self.env_files.values}

    def source(self, key: Key) -> str:
        """Where the effective value of ``key`` comes from."""
        if os.environ.get(key.env):
            return "env"
        if key.env in self.env_files.values:
            return f"env {key.file_env}"
        if key.env in self.file.values:
            return f"file ({key.name}_file)" if key.env in self.file.secret_files else "file"
        return "default"

    def label(self, problem: Problem) -> Problem:
        """Say when a key's bad value came from the environment, not the file."""
        key = BY_PATH.get(problem.key)
        if key is None:
            return problem
        source = self.source(key)
        if source.startswith("env"):
            name = key.env if source == "env" else key.file_env
            return Problem(f"{problem.key} (env {name})", problem.reason)
        return problem


def load(path: str | Path | None, environ: Mapping[str, str] | None = None) -> Loaded:
    """The file (``None``: none) and the secrets the environment names by file."""
    environ = os.environ if environ is None else environ
    return Loaded(read_file(path) if path else Layer(), env_secret_files(environ))


def config_path(given: str | Path | None) -> str | None:
    """``--config``, else ``STREAMPROC_CONFIG``, else none."""
    return str(given) if given else os.environ.get(CONFIG_ENV) or None


def environ() -> dict[str, str]:
    """The process environment without its empty variables: ``X=`` means unset, as every
    reader has always treated it, so it does not hide the config file's value."""
    return {k: v for k, v in os.environ.items() if v}


def configuration(loaded: Loaded, environ: Mapping[str, str]) -> Configuration:
    """The one :class:`Configuration` of a process: the file's values, the environment's
    secret files and variables over them, and the file's tables."""
    return Configuration(
        values={**loaded.values, **environ},
        documents={k: dict(v) for k, v in loaded.file.documents.items()},
    )


def activate(given: str | Path | None = None, *, typed: bool = True) -> Configuration:
    """Read the config file (``--config`` or ``STREAMPROC_CONFIG``), the environment's secret
    files and the environment, once, into the process's :class:`Configuration`, and decode
    every section of it (``typed``; ``config show`` shows what does not decode instead):
    :class:`ConfigFileError` lists every problem, each bad value named as ``config check``
    names it, so a bad value of any section stops every process at start."""
    path = config_path(given)
    loaded = load(path)
    if loaded.problems:
        raise ConfigFileError(path or "environment", loaded.problems)
    conf = configuration(loaded, environ())
    if not typed:
        return conf
    try:
        sections = decode(conf.values)
    except SectionProblems as exc:
        found = [loaded.label(Problem(key.path, why)) for key, why in exc.problems]
        raise ConfigFileError(path or "environment", found) from None
    return Configuration(values=conf.values, documents=conf.documents, decoded=sections)


def environment_only() -> Configuration:
    """The configuration of a command that takes no settings file: the environment alone."""
    return Configuration(values=environ())
