"""``config check``'s second half: every capability's own validation (core settings, planner,
runner, auditor, feeds, signing and trusted keys, gateway sources and issuers, NATS credentials, the
Notify stream, feed and HTTP consumer) run
against the merged settings, each failure attributed to the key that causes it."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from streamproc import config, tracing
from streamproc.audit import settings as audit_settings
from streamproc.audit import signing
from streamproc.bus import streams
from streamproc.bus.connect import AUTH_ENV, NatsAuth
from streamproc.client import settings as client_settings
from streamproc.configfile.loader import Problem
from streamproc.configfile.registry import BY_ENV, BY_PATH, KEYS
from streamproc.configfile.typed import problems
from streamproc.feeds import settings as feeds_settings
from streamproc.gateway import settings as gw
from streamproc.gateway.auth.callers import issuer_keys
from streamproc.gateway.auth.dpop import nonce_key
from streamproc.gateway.auth.tls import server_context
from streamproc.gateway.auth.webhooks import Source
from streamproc.gateway.settings import GatewaySettings
from streamproc.notify import feed_consumer, registrations
from streamproc.planner import settings as planner_settings
from streamproc.readmodel.settings import RETENTION_ENV, retention_days
from streamproc.runner import settings as runner_settings
from streamproc.runtime.lease import ENV_TTL, lease_ttl
from streamproc.status.record import INTERVAL_ENV, interval_s

Env = Mapping[str, str]
_FAILURES = (ValueError, TypeError, OSError)
"""What the readers raise for bad input (ConfigError, msgspec and nacl errors are
ValueErrors; unreadable files are OSErrors)."""


def typed_problems(env: Env) -> list[Problem]:
    """Each set variable parsed by its key's type, choices and bounds: the decode every
    process makes at start (:func:`streamproc.configfile.typed.problems`)."""
    return [Problem(key.path, why) for key, why in problems(env)]


def attribute(
    section: str, run: Callable[[Env], object], envs: Iterable[str], env: Env
) -> list[Problem]:
    """Run a reader on ``env``; if it fails, run it on each of its keys alone to name the
    culprit(s) (the readers' constraints are per key); else name the section."""
    mine = {e: env[e] for e in envs if env.get(e)}
    try:
        run(mine)
        return []
    except _FAILURES as exc:
        whole = str(exc)
    out = []
    for name, value in mine.items():
        try:
            run({name: value})
        except _FAILURES as exc:
            out.append(Problem(BY_ENV[name].path, _own_words(str(exc), name)))
    return out or [Problem(section, whole)]


def _own_words(reason: str, env_name: str) -> str:
    """The reason without what the key already says (its variable, msgspec's ``$.field``)."""
    reason = re.sub(r" - at `\$[^`]*`$", "", reason)
    reason = re.sub(rf"^{env_name}=('[^']*'|\S+): ", "", reason)  # ``VAR='x': reason``
    return reason.removeprefix(f"{env_name}: ")


def _envs(prefix: str) -> list[str]:
    return [k.env for k in KEYS if k.path.startswith(prefix)]


def check_core(env: Env) -> list[Problem]:
    return attribute(
        "node",
        lambda e: config.load(configuration=config.Configuration(values=e)),
        config.ENV.values(),
        env,
    )


def check_planner(env: Env) -> list[Problem]:
    return attribute(
        "planner", lambda e: planner_settings.load(e), planner_settings.ENV.values(), env
    )


def check_runner(env: Env) -> list[Problem]:
    return attribute("runner", runner_settings.load, _envs("runner."), env)


def check_audit(env: Env) -> list[Problem]:
    out = attribute(
        "audit", lambda e: audit_settings.load(None, e), audit_settings.ENV.values(), env
    )
    data_dir = Path(env.get("STREAMPROC_DATA_DIR") or "data")
    signing_env = [signing.ENV_SIGNING_KEY, signing.ENV_KEY_ID]
    if env.get(signing.ENV_SIGNING_KEY):
        out += attribute(
            "audit", lambda e: signing.load_signer(data_dir, env=e), signing_env[:1], env
        )
    if env.get(signing.ENV_TRUSTED_KEYS):
        out += attribute(
            "audit",
            lambda e: signing.parse_trusted_keys(e[signing.ENV_TRUSTED_KEYS]),
            [signing.ENV_TRUSTED_KEYS],
            env,
        )
    return out


def check_feeds(env: Env) -> list[Problem]:
    return attribute("feeds", feeds_settings.load, feeds_settings.ENV.values(), env)


def check_nats(env: Env) -> list[Problem]:
    values = {f: env.get(var, "") for f, var in AUTH_ENV.items()}
    auth = NatsAuth(**values)
    return [Problem(BY_ENV[AUTH_ENV[f]].path, reason) for f, reason in auth.problems()]


def check_operations(env: Env) -> list[Problem]:
    """Lease, heartbeat, read-model retention and tracing settings, by their own readers."""
    out: list[Problem] = []
    out += attribute("lease", lease_ttl, [ENV_TTL], env)
    out += attribute("readmodel", retention_days, [RETENTION_ENV], env)
    out += attribute("status", interval_s, [INTERVAL_ENV], env)
    out += attribute("otel", tracing.exporter_kind, [tracing.EXPORTER_ENV], env)
    kind = (env.get(tracing.EXPORTER_ENV) or "none").strip().lower()
    if kind in ("otlp", "console") and not _installed("opentelemetry.sdk"):
        out.append(Problem("otel.exporter", "needs pip install 'streamproc[otel]'"))
    endpoint = tracing.ENDPOINT_ENV
    if env.get(endpoint):
        out += attribute("otel", lambda e: tracing.traces_url(e[endpoint]), [endpoint], env)
    return out


def check_notify(env: Env) -> list[Problem]:
    """The Notify stream's retention, the feed's registrations, the HTTP consumer and the
    client's token endpoint, by their own readers."""
    out = attribute(
        "notify", streams.configured_notify_retention,
        [streams.NOTIFY_MAX_AGE_ENV, streams.NOTIFY_MAX_RETENTION_ENV], env,
    )  # fmt: skip
    out += attribute("notify", registrations.load_settings,
                     [registrations.LEASE_ENV, registrations.CONSUMERS_ENV], env)  # fmt: skip

    def consumer(e: Env) -> object:  # the URL and tenants only when the file sets them
        return feed_consumer.load_settings(
            base_url=None if e.get(feed_consumer.ENV["base_url"]) else "http://feed",
            tenants=[] if e.get(feed_consumer.ENV["tenants"]) else ["tenant"],
            kinds=[], env=e,
        )  # fmt: skip

    out += attribute("notify", consumer, list(feed_consumer.ENV.values()), env)
    url = client_settings.TOKEN_URL_ENV
    if env.get(url):
        out += attribute(
            "client", lambda e: client_settings.absolute_http_url(url, e[url]), [url], env
        )
    return out


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def check_gateway(
    env: Env, document: Mapping[str, Any], *, file: str | None = None
) -> list[Problem]:
    """Scalars, the tables, then what the gateway builds at start: issuer keys, webhook
    source secrets and keys, the DPoP nonce secret, the TLS listener's certificates.
    ``file``: check this gateway file instead of the one the environment names."""
    envs = [e for e in _envs("gateway.") if not (file and e == gw.ENV_FILE)]
    out = attribute("gateway", lambda e: gw.load(e, document={}), envs, env)
    has_issuer, has_key = (
        bool(env.get(gw.ENV_PREFIX + "ISSUER")),
        bool(env.get(gw.ENV_PREFIX + "ISSUER_KEY")),
    )
    if has_issuer != has_key:
        missing = "gateway.issuer_key" if has_issuer else "gateway.issuer"
        out.append(Problem(missing, "gateway.issuer and gateway.issuer_key go together"))
    bad = {BY_PATH[p.key].env for p in out if p.key in BY_PATH}
    good = {e: env[e] for e in envs if env.get(e) and e not in bad}
    try:
        s = gw.load({**good, gw.ENV_FILE: file} if file else good, document=document)
    except gw.GatewayConfigError as exc:
        return [*out, _gateway_path(str(exc))]
    return out + _gateway_parts(s, env)


def is_gateway_file(path: Path) -> bool:
    """A gateway file (what ``gateway.config`` / ``STREAMPROC_GATEWAY_CONFIG`` names), not a
    settings file: JSON (a settings file is TOML), or ``*.toml`` with gateway keys only at
    the top — the two ways the gateway reads its file."""
    try:
        text = path.read_text()
        doc = tomllib.loads(text) if path.suffix == ".toml" else msgspec.json.decode(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, msgspec.DecodeError):
        return False
    if path.suffix != ".toml":
        return isinstance(doc, dict)
    return bool(doc) and set(doc) <= set(GatewaySettings.__struct_fields__)


def check_gateway_file(path: str, env: Env) -> list[Problem]:
    """The gateway file at ``path`` as the gateway would load it (with the environment's
    ``STREAMPROC_GATEWAY_*`` overrides), each problem named by the file's own key."""

    def named(p: Problem) -> Problem:
        key = BY_PATH.get(p.key)
        if key is not None and env.get(key.env):  # an override from the environment
            return Problem(f"{key.path.removeprefix('gateway.')} (env {key.env})", p.reason)
        return Problem(path if p.key == "gateway" else p.key.removeprefix("gateway."), p.reason)

    return [named(p) for p in check_gateway(env, {}, file=path)]


def _gateway_path(message: str) -> Problem:
    text = message.removeprefix("gateway configuration: ")
    reason, sep, where = text.rpartition(" - at `")
    if not sep:
        return Problem("gateway", text)
    return Problem("gateway" + where.rstrip("`").removeprefix("$"), reason)


def _gateway_parts(s: Any, env: Mapping[str, str]) -> list[Problem]:
    out = []
    try:
        nonce_key(s.dpop, env)
    except _FAILURES as exc:
        out.append(Problem("gateway.dpop.nonce_secret", str(exc)))
    for i, issuer in enumerate(s.issuers):
        try:
            issuer_keys(msgspec.structs.replace(s, issuers=[issuer]), env)
        except _FAILURES as exc:
            out.append(Problem(f"gateway.issuers[{i}] ({issuer.issuer})", str(exc)))
    for i, source in enumerate(s.webhooks):
        try:
            Source(source, env)
        except _FAILURES as exc:
            out.append(Problem(f"gateway.webhooks[{i}] ({source.name})", str(exc)))
    if s.tls is not None:
        extra = [w.mtls.ca_file for w in s.webhooks if w.mtls and w.mtls.ca_file]
        try:
            server_context(s.tls, extra)
        except _FAILURES as exc:
            out.append(Problem("gateway.tls", str(exc)))
    return out


def check_all(env: Env, documents: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """Type problems first; the capabilities then see only the well-typed values, so one
    mistake is reported once."""
    out = typed_problems(env)
    bad = {BY_PATH[p.key].env for p in out if p.key in BY_PATH}
    clean = {k: v for k, v in env.items() if k not in bad}
    for check in (
        check_core,
        check_planner,
        check_runner,
        check_audit,
        check_feeds,
        check_nats,
        check_operations,
        check_notify,
    ):
        out += check(clean)
    out += check_gateway(clean, documents.get("gateway", {}))
    return out
