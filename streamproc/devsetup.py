"""Development authentication for ``streamproc up --demo`` (what ``make run`` starts).

Production gateways take their issuers and webhook secrets from ``STREAMPROC_GATEWAY_CONFIG``
and answer 401 until they are configured. For a newcomer's first run this writes, once, under
the data directory: a development token issuer key, Feedser and Vexer webhook secrets, and a gateway
configuration that trusts them for tenant ``demo`` (bearer or DPoP tokens), and points the
process at it — unless a gateway configuration is already given. A demo listens on loopback
only: its issuer's private key sits in the data directory and it accepts bearer tokens.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from nacl.signing import SigningKey

from streamproc.client.settings import client_of, dpop_key
from streamproc.config import ConfigError, Settings
from streamproc.configfile.registry import env_name
from streamproc.gateway.tokens_cli import write_key_file

DEMO_TENANT = "demo"
DEFAULT_DATA_DIR = Settings().data_dir
DEFAULT_API_URL = f"http://{Settings().http_host}:{Settings().http_port}"
DEV_ISSUER = "https://authority.dev.local"


def cli_command() -> str:
    """This ``streamproc`` as the guide shows it: ``.venv/bin/streamproc`` in the checkout
    ``make run`` runs from, plain ``streamproc`` when it is the one on PATH."""
    exe = Path(sys.argv[0]).resolve()
    if exe.name != "streamproc":  # python -m, a test runner
        return ".venv/bin/streamproc"
    with contextlib.suppress(ValueError):
        return str(exe.relative_to(Path.cwd()))
    on_path = shutil.which("streamproc")
    return "streamproc" if on_path and Path(on_path).resolve() == exe else str(exe)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def refuse_exposed_demo(settings: Settings) -> None:
    """:class:`ConfigError` unless every listener of ``up --demo`` is on loopback."""
    hosts = [(env_name("http.host"), settings.http_host)]
    if settings.ops_port is not None:
        hosts.append((env_name("http.ops_host"), settings.ops_host))
    for name, host in hosts:
        if not is_loopback(host):
            raise ConfigError(
                f"--demo listens on loopback only (it trusts a development token issuer and "
                f"bearer tokens), not {name}={host}: unset it, or run without --demo with a "
                f"gateway configuration of your own"
            )


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


@dataclass
class DevAuth:
    issuer_key: Path | None
    config: Path | None
    client_key: Path | None = None
    """The DPoP key commands of ours sign with: the guide binds its tokens to it."""
    data_dir: Path = DEFAULT_DATA_DIR
    settings: Settings = field(default_factory=Settings)
    """The settings the process runs with: its own, with the development auth selected."""

    def guide(self, http_url: str) -> str:
        if self.issuer_key is None:
            return "  -- gateway: as configured (config file or STREAMPROC_GATEWAY_CONFIG)"
        cli = cli_command()
        # `streamproc api` signs with the data directory's DPoP key (DPoP-only gateways too)
        # and calls the default address unless told otherwise.
        client = self.client_key
        where = "" if self.data_dir == DEFAULT_DATA_DIR else f" --data-dir {self.data_dir}"
        if http_url != DEFAULT_API_URL:
            where += f" --url {http_url}"
        return "\n".join(
            [
                "",
                f"  -- development auth (written to {self.config}):",
                f"  TOKEN=$({cli} token issue --key {self.issuer_key} \\",
                f"      --tenant {DEMO_TENANT} --scope scheduler.admin --dpop-key {client})",
                f'  {cli} api GET /schedules --token "$TOKEN"{where}',
                f'  {cli} api GET /runs --token "$TOKEN"{where}',
                f"  export STREAMPROC_FEEDSER_SECRET=$(cat {self._secret_path()})",
                f"  export STREAMPROC_VEXER_SECRET=$(cat {self._secret_path('vexer')})",
            ]
        )

    def _secret_path(self, kind: str = "feedser") -> Path:
        assert self.config is not None
        return self.config.with_name(f"{kind}.secret")


def prepare_dev_auth(settings: Settings) -> DevAuth:
    """Create (once) and select the development gateway configuration."""
    conf = settings.configuration
    if conf.get(env_name("gateway.config")) or conf.document("gateway"):
        return DevAuth(None, None, settings=settings)  # configured: by a file of the user's
    base = settings.data_dir.resolve() / "dev"
    key_file = base / "issuer.jwk"
    secret_file = base / "feedser.secret"
    vexer_secret = base / "vexer.secret"
    config = base / "gateway.json"
    if not key_file.exists():
        write_key_file(key_file, SigningKey.generate(), kid=uuid.uuid4().hex[:16], iss=DEV_ISSUER)
    for f in (secret_file, vexer_secret):
        if not f.exists():
            _write_private(f, secrets.token_hex(32) + "\n")
    key_doc = json.loads(key_file.read_text())
    gateway = {
        "issuers": [
            {
                "issuer": DEV_ISSUER,
                "tenants": [DEMO_TENANT],
                "keys": [{"kid": key_doc["kid"], "public_key": key_doc["x"]}],
            }
        ],
        "required_modes": ["bearer", "dpop"],
        "webhooks": [
            {
                "name": "feedser",
                "kind": "feedser",
                "tenants": [DEMO_TENANT],
                "hmac_secrets": [f"file:{secret_file}"],
            },
            {
                "name": "vexer",
                "kind": "vexer",
                "tenants": [DEMO_TENANT],
                "hmac_secrets": [f"file:{vexer_secret}"],
            },
        ],
    }
    _write_private(config, json.dumps(gateway, indent=2) + "\n")
    client = dpop_key(settings.data_dir, client_of(conf)).path
    chosen = {env_name("gateway.config"): str(config)}
    if not conf.get(env_name("feedser.secret")):
        chosen[env_name("feedser.secret")] = secret_file.read_text().strip()
    if not conf.get(env_name("vexer.secret")):
        chosen[env_name("vexer.secret")] = vexer_secret.read_text().strip()
    # The commands this process starts (and the demo's `feedser export`, run by hand or by
    # tests in this process) find the development auth in their environment.
    os.environ.update(chosen)
    configured = msgspec.structs.replace(settings, configuration=conf.with_values(chosen))
    return DevAuth(key_file, config, client, settings.data_dir, configured)
