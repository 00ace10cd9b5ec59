"""The auditor's Ed25519 signing key and the keyring snapshots and bundles are checked with.

- ``STREAMPROC_AUDIT_SIGNING_KEY``: the 32-byte seed as 64 hex digits or standard base64, or
  ``@path`` of a file holding either.
- ``STREAMPROC_AUDIT_KEY_ID``: the key id put in signatures (default ``audit-`` and 16 hex
  digits of SHA-256 of the public key).
- ``STREAMPROC_AUDIT_TRUSTED_KEYS``: other public keys to accept, ``keyid=BASE64,...`` (or a
  bare ``BASE64``), or ``@path`` of a file with one per line or a JSON object.

Without a configured key the auditor generates one on first start into
``<data>/keys/audit-ed25519.seed`` (mode 0600) and says so; commands never generate keys.
Rotation: configure the new seed, keep the old public key in the trusted keys, so snapshots
signed before the rotation still verify.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from nacl.signing import SigningKey, VerifyKey

from streamproc.audit.dsse import (
    Keyring,
    Signer,
    public_key_b64,
    signing_key_from_seed,
    verify_key_from_b64,
)
from streamproc.config import ConfigError
from streamproc.configfile.registry import env_name

log = logging.getLogger(__name__)

ENV_SIGNING_KEY = env_name("audit.signing_key")
ENV_KEY_ID = env_name("audit.key_id")
ENV_TRUSTED_KEYS = env_name("audit.trusted_keys")
SEED_FILE = Path("keys") / "audit-ed25519.seed"


def default_key_id(key: SigningKey | VerifyKey) -> str:
    verify_key = key.verify_key if isinstance(key, SigningKey) else key
    return "audit-" + hashlib.sha256(bytes(verify_key)).hexdigest()[:16]


def seed_path(data_dir: Path) -> Path:
    return data_dir / SEED_FILE


def _indirect(value: str, what: str) -> str:
    """``@path`` means the value is in that file."""
    value = value.strip()
    if not value.startswith("@"):
        return value
    path = Path(value[1:]).expanduser()
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror}") from None


def _seed(text: str, what: str) -> SigningKey:
    try:
        return signing_key_from_seed(text)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def load_signer(data_dir: Path, *, env: Mapping[str, str], generate: bool = False) -> Signer:
    """The configured signer; else the seed file in ``data_dir``; else (``generate``) a new
    key written there with mode 0600; else :class:`ConfigError`."""
    configured = env.get(ENV_SIGNING_KEY, "").strip()
    path = seed_path(data_dir)
    if configured:
        key = _seed(_indirect(configured, ENV_SIGNING_KEY), ENV_SIGNING_KEY)
    elif path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("audit signing key %s is readable by others (mode %o)", path, mode)
        key = _seed(path.read_text(), str(path))
    elif generate:
        key = SigningKey.generate()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(bytes(key).hex() + "\n")
        log.warning(
            "generated a new audit signing key in %s (key id %s, public key %s): back it up, "
            "and give the public key to whoever verifies this installation's snapshots",
            path,
            env.get(ENV_KEY_ID) or default_key_id(key),
            public_key_b64(key),
        )
    else:
        raise ConfigError(
            f"no audit signing key: set {ENV_SIGNING_KEY} or start the auditor once to "
            f"generate {path}"
        )
    return Signer(env.get(ENV_KEY_ID, "").strip() or default_key_id(key), key)


def parse_public_key(item: str) -> tuple[str, VerifyKey]:
    """``BASE64`` or ``keyid=BASE64`` (a bare key gets its default key id)."""
    item = item.strip()
    try:
        key = verify_key_from_b64(item)
        return default_key_id(key), key
    except ValueError:
        pass
    key_id, sep, text = item.partition("=")
    if not sep or not key_id:
        raise ConfigError(f"trusted key {item!r}: want BASE64 or keyid=BASE64")
    try:
        return key_id.strip(), verify_key_from_b64(text)
    except ValueError as exc:
        raise ConfigError(f"trusted key {key_id!r}: {exc}") from None


def parse_trusted_keys(value: str) -> list[tuple[str, VerifyKey]]:
    """The trusted-keys setting: a list, a file of lines, or a JSON object."""
    text = _indirect(value, ENV_TRUSTED_KEYS).strip()
    if not text:
        return []
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{ENV_TRUSTED_KEYS}: not a JSON object: {exc}") from None
        return [parse_public_key(f"{k}={v}") for k, v in doc.items()]
    items = [s for line in text.splitlines() for s in line.split(",")]
    return [parse_public_key(s) for s in items if s.strip() and not s.strip().startswith("#")]


def build_keyring(
    data_dir: Path | None,
    *,
    env: Mapping[str, str],
    extra: Iterable[str] = (),
    include_own: bool = True,
) -> Keyring:
    """Trusted keys from ``env`` (the process's configuration) and ``extra``
    (``--trusted-key``), plus this installation's own public key when one is configured or was
    generated."""
    ring = Keyring()
    pairs = parse_trusted_keys(env.get(ENV_TRUSTED_KEYS, ""))
    pairs += [parse_public_key(s) for s in extra]
    if include_own and data_dir is not None:
        try:
            signer = load_signer(data_dir, env=env)
            pairs.append((signer.key_id, signer.signing_key.verify_key))
        except ConfigError:
            pass
    for key_id, key in pairs:
        try:
            ring.add(key_id, key)
        except ValueError as exc:
            raise ConfigError(f"trusted keys: {exc}") from None
    return ring


def public_key_line(signer: Signer) -> str:
    """How to trust this signer elsewhere: ``keyid=BASE64``."""
    return f"{signer.key_id}={base64.b64encode(bytes(signer.signing_key.verify_key)).decode()}"
