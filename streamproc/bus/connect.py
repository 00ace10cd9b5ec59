"""Connecting to NATS, with the server-version floor the design depends on, and the
credentials and TLS settings of ``nats.*`` (``STREAMPROC_NATS_*``)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from streamproc.bus.fastclient import FastClient
from streamproc.config import ConfigError, Configuration
from streamproc.configfile.registry import env_name

MIN_SERVER = (2, 14)

AUTH_ENV = {
    "user": env_name("nats.user"),
    "password": env_name("nats.password"),
    "token": env_name("nats.token"),
    "nkey_seed_file": env_name("nats.nkey_seed_file"),
    "creds_file": env_name("nats.creds_file"),
    "tls_ca": env_name("nats.tls_ca"),
    "tls_cert": env_name("nats.tls_cert"),
    "tls_key": env_name("nats.tls_key"),
}


class NatsVersionError(RuntimeError):
    pass


class NatsConnectError(RuntimeError):
    pass


@dataclass(frozen=True)
class NatsAuth:
    """How to authenticate to a configured server: at most one of user and password, token,
    NKey seed or creds file; TLS with a CA and optionally a client certificate."""

    user: str = ""
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    nkey_seed_file: str = ""
    creds_file: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""

    @classmethod
    def configured(cls, configuration: Configuration) -> NatsAuth:
        """From the typed ``[nats]`` section; the password and token as given (the decode
        strips what it types, and a secret keeps its spaces). :class:`ConfigError` names each
        bad variable."""
        nats = configuration.sections.nats
        values = {f: getattr(nats, f) or "" for f in AUTH_ENV}
        for secret in ("password", "token"):
            values[secret] = configuration.get(AUTH_ENV[secret]) or ""
        auth = cls(**values)
        problems = auth.problems()
        if problems:
            raise ConfigError("; ".join(f"{AUTH_ENV[f]}: {reason}" for f, reason in problems))
        return auth

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> NatsAuth:
        """:meth:`configured` from the text of ``env``, decoded as at start (tests)."""
        return cls.configured(Configuration(values=env))

    def problems(self) -> list[tuple[str, str]]:
        """Each unusable setting as ``(field, reason)``."""
        out: list[tuple[str, str]] = []
        if bool(self.user) != bool(self.password):
            missing, given = ("password", "user") if self.user else ("user", "password")
            out.append((missing, f"missing: a {given} is set, user and password go together"))
        methods = [f for f in ("user", "token", "nkey_seed_file", "creds_file") if getattr(self, f)]
        if len(methods) > 1:
            out.append((methods[1], f"give one way to authenticate, not {' and '.join(methods)}"))
        if bool(self.tls_cert) != bool(self.tls_key):
            missing, given = ("tls_key", "tls_cert") if self.tls_cert else ("tls_cert", "tls_key")
            out.append((missing, f"missing: {given} is set, and they go together"))
        for f in ("nkey_seed_file", "creds_file", "tls_ca", "tls_cert", "tls_key"):
            path = getattr(self, f)
            if path:
                try:
                    Path(path).read_bytes()
                except OSError as exc:
                    out.append((f, f"cannot read {path}: {exc.strerror or exc}"))
        if out:
            return out
        if self.nkey_seed_file or self.creds_file:
            out += self._nkey_problems()
        if self.tls_ca or self.tls_cert:
            problem = self._tls()[1]
            if problem:
                out.append(problem)
        return out

    def _nkey_problems(self) -> list[tuple[str, str]]:
        try:  # deferred: the optional nkeys package, needed only with a seed or creds file
            import nkeys
        except ImportError:
            f = "nkey_seed_file" if self.nkey_seed_file else "creds_file"
            return [(f, "needs the nkeys package (pip install 'nats-py[nkeys]')")]
        if self.nkey_seed_file:
            seed = Path(self.nkey_seed_file).read_bytes().strip()
            try:
                nkeys.from_seed(bytearray(seed))
            except Exception:  # nkeys raises its own error types, and binascii errors
                return [("nkey_seed_file", f"{self.nkey_seed_file} holds no NKey seed (SU...)")]
        if self.creds_file:
            text = Path(self.creds_file).read_text(errors="replace")
            if "NATS USER JWT" not in text or "NKEY SEED" not in text:
                return [("creds_file", f"{self.creds_file} is not a .creds file (JWT and seed)")]
        return []

    def ssl_context(self) -> ssl.SSLContext:
        """A client context trusting ``tls_ca`` and presenting ``tls_cert`` if given."""
        ctx, problem = self._tls()
        if problem:
            raise ConfigError(f"{AUTH_ENV[problem[0]]}: {problem[1]}")
        return ctx

    def _tls(self) -> tuple[ssl.SSLContext, tuple[str, str] | None]:
        ctx = ssl.create_default_context()
        if self.tls_ca:
            try:
                ctx.load_verify_locations(cafile=self.tls_ca)
            except (ssl.SSLError, OSError):
                return ctx, ("tls_ca", f"{self.tls_ca} holds no PEM CA certificate")
        if self.tls_cert:
            try:
                ctx.load_cert_chain(self.tls_cert, self.tls_key)
            except (ssl.SSLError, OSError):
                reason = f"{self.tls_cert} and {self.tls_key} are not a PEM certificate and its key"
                return ctx, ("tls_cert", reason)
        return ctx, None

    def options(self) -> dict[str, object]:
        """Keyword arguments for nats-py's ``connect``."""
        opts: dict[str, object] = {}
        if self.user:
            opts.update(user=self.user, password=self.password)
        if self.token:
            opts["token"] = self.token
        if self.nkey_seed_file:
            opts["nkeys_seed"] = self.nkey_seed_file
        if self.creds_file:
            opts["user_credentials"] = self.creds_file
        if self.tls_ca or self.tls_cert:
            opts["tls"] = self.ssl_context()
        return opts

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


def servers(url: str) -> list[str]:
    """``NATS_URL`` may name a cluster: comma-separated URLs."""
    return [u.strip() for u in url.split(",") if u.strip()]


async def connect(
    url: str, *, name: str = "streamproc", auth: NatsAuth | None = None, **options: object
) -> FastClient:
    """Connect (``url``: one server or a comma-separated list) with ``auth``, and refuse
    servers older than 2.14 (per-subject expected-sequence fixes)."""
    recent: list[Exception] = []

    async def remember(exc: Exception) -> None:
        """Keep the last few (an auth failure says why "no servers available"); quiet else:
        errors surface through the calls that fail."""
        recent.append(exc)
        del recent[:-8]

    opts: dict[str, object] = {
        "name": name,
        "max_reconnect_attempts": 3,
        "error_cb": remember,
        "reconnect_time_wait": 0.5,
        "connect_timeout": 5,
        "allow_reconnect": True,
        "pending_size": 64 * 1024 * 1024,
    }
    if auth:
        opts.update(auth.options())
    opts.update(options)
    nc = FastClient()
    # nats-py can wait forever on a TLS handshake that fails (an unknown CA): bound it.
    attempts = max(int(str(opts["max_reconnect_attempts"])), 0) + 1
    per_try = float(str(opts["connect_timeout"])) + float(str(opts["reconnect_time_wait"]))
    limit = per_try * attempts * len(servers(url))
    try:
        async with asyncio.timeout(limit):
            await nc.connect(servers=servers(url), **opts)  # type: ignore[arg-type]  # nats-py's connect options are typed one by one; opts holds them by name
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, TimeoutError):
            reason = f"no connection within {limit:g} s"
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1):
                    await nc.close()
        # The server's own refusal (authorization) says more than the reset that follows it.
        cause = next((e for e in reversed(recent) if not isinstance(e, OSError)), None)
        cause = cause or (recent[-1] if recent else None)
        if cause is not None and str(cause) not in reason:
            reason = f"{reason} ({cause})"
        raise NatsConnectError(f"cannot connect to NATS at {url}: {reason}") from None
    if auth and (auth.tls_ca or auth.tls_cert) and not nc._server_info.get("tls_required"):
        await nc.close()  # TLS was configured: never run on in plain text
        raise NatsConnectError(
            f"NATS at {url} does not use TLS, but nats.tls_ca / nats.tls_cert are set"
        )
    # Bounded attempts for the first connection (a clear error), unbounded once running.
    nc.options["max_reconnect_attempts"] = -1
    v = nc.connected_server_version
    if (v.major, v.minor) < MIN_SERVER:
        await nc.close()
        raise NatsVersionError(
            f"nats-server at {url} is {v.major}.{v.minor}.{v.patch}; streamproc needs >= "
            f"{MIN_SERVER[0]}.{MIN_SERVER[1]}"
        )
    return nc
