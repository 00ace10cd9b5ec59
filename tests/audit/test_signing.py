"""Key configuration, generation on first start, trusted keys and rotation; audit settings."""

from __future__ import annotations

import base64
import logging
import stat
from pathlib import Path

import pytest
from nacl.signing import SigningKey

from streamproc.audit import layout
from streamproc.audit.log import AuditLog
from streamproc.audit.settings import AuditSettings
from streamproc.audit.settings import load as load_settings
from streamproc.audit.signing import (
    ENV_KEY_ID,
    ENV_SIGNING_KEY,
    ENV_TRUSTED_KEYS,
    build_keyring,
    default_key_id,
    load_signer,
    parse_trusted_keys,
    public_key_line,
    seed_path,
)
from streamproc.audit.snapshots import snapshot_event
from streamproc.audit.verify import verify_tenant
from streamproc.config import ConfigError, Settings
from streamproc.events.envelope import encode
from streamproc.hlc import Timestamp
from streamproc.runtime.projection import Folder
from streamproc.state import keys
from streamproc.state.store import MemoryStore
from tests.audit.helpers import chained_events, signer
from tests.samples import BASE_MS

SEED = bytes(range(32))
PUB = base64.b64encode(bytes(SigningKey(SEED).verify_key)).decode()


def test_signing_key_from_the_environment(tmp_path: Path) -> None:
    hex_seed = load_signer(tmp_path, env={ENV_SIGNING_KEY: SEED.hex()})
    b64_seed = load_signer(tmp_path, env={ENV_SIGNING_KEY: base64.b64encode(SEED).decode()})
    (tmp_path / "seed").write_text(SEED.hex() + "\n")
    from_file = load_signer(tmp_path, env={ENV_SIGNING_KEY: f"@{tmp_path / 'seed'}"})
    assert (
        bytes(hex_seed.signing_key) == bytes(b64_seed.signing_key) == bytes(from_file.signing_key)
    )
    assert hex_seed.key_id == default_key_id(SigningKey(SEED)) and hex_seed.key_id.startswith(
        "audit-"
    )
    named = load_signer(tmp_path, env={ENV_SIGNING_KEY: SEED.hex(), ENV_KEY_ID: "ops-2026"})
    assert named.key_id == "ops-2026"
    assert public_key_line(named) == f"ops-2026={PUB}"
    for bad in ("xyz", "00" * 31, f"@{tmp_path / 'nope'}"):
        with pytest.raises(ConfigError, match=ENV_SIGNING_KEY):
            load_signer(tmp_path, env={ENV_SIGNING_KEY: bad})


def test_key_is_generated_once_with_mode_0600(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ConfigError, match="no audit signing key"):
        load_signer(tmp_path, env={})
    with caplog.at_level(logging.WARNING):
        first = load_signer(tmp_path, env={}, generate=True)
    path = seed_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert "generated a new audit signing key" in caplog.text and first.key_id in caplog.text
    again = load_signer(tmp_path, env={}, generate=True)
    assert bytes(again.signing_key) == bytes(first.signing_key)
    configured = load_signer(tmp_path, env={ENV_SIGNING_KEY: SEED.hex()})
    assert bytes(configured.signing_key) == SEED  # configuration wins over the file


def test_trusted_keys_forms(tmp_path: Path) -> None:
    other = base64.b64encode(bytes(SigningKey(b"\x07" * 32).verify_key)).decode()
    listed = parse_trusted_keys(f"old={PUB}, {other}")
    assert [k for k, _ in listed] == ["old", default_key_id(SigningKey(b"\x07" * 32).verify_key)]
    (tmp_path / "keys.txt").write_text(f"# retired 2026-01\nold={PUB}\n{other}\n")
    assert [k for k, _ in parse_trusted_keys(f"@{tmp_path / 'keys.txt'}")] == [k for k, _ in listed]
    (tmp_path / "keys.json").write_text(f'{{"old": "{PUB}"}}')
    assert [k for k, _ in parse_trusted_keys(f"@{tmp_path / 'keys.json'}")] == ["old"]
    for bad in ("old=notbase64", "=" + PUB, "{not json"):
        with pytest.raises(ConfigError):
            parse_trusted_keys(bad)
    ring = build_keyring(
        tmp_path, env={ENV_TRUSTED_KEYS: f"old={PUB}", ENV_SIGNING_KEY: SEED.hex()}
    )
    assert sorted(ring) == sorted(["old", default_key_id(SigningKey(SEED))])
    with pytest.raises(ConfigError, match="already bound"):
        build_keyring(None, env={ENV_TRUSTED_KEYS: f"k={PUB}"}, extra=[f"k={other}"])


def test_rotation_keeps_old_snapshots_verifiable() -> None:
    old, new = signer(b"\x01" * 32, "k-2025"), signer(b"\x02" * 32, "k-2026")
    store = MemoryStore()
    folder = Folder(store, [AuditLog()])
    events = chained_events(20)
    folder.apply(
        [(i + 1, "s", encode(e)) for i, e in enumerate(events)], keys.Checkpoint("S", "e", 20)
    )
    entries = list(layout.iter_entries(store, "acme"))
    ts = Timestamp(BASE_MS + 100, 0, "aud")
    snaps = [
        snapshot_event("acme", entries[:10], ts, old),
        snapshot_event("acme", entries[10:], ts, new),
    ]
    folder.apply(
        [(21 + i, "s", encode(e)) for i, e in enumerate(snaps)], keys.Checkpoint("S", "e", 22)
    )
    both = build_keyring(
        None,
        env={},
        extra=[
            f"k-2025={base64.b64encode(bytes(old.signing_key.verify_key)).decode()}",
            f"k-2026={base64.b64encode(bytes(new.signing_key.verify_key)).decode()}",
        ],
    )
    assert verify_tenant(store, "acme", both).ok
    both.remove("k-2025")  # dropping the old key (e.g. compromised) fails its snapshots
    report = verify_tenant(store, "acme", both)
    assert (report.ok, report.broken_position, report.field) == (False, 0, "snapshot")


def test_audit_settings() -> None:
    assert load_settings(None, {}) == AuditSettings()
    s = load_settings(Settings(max_clock_skew_ms=1234), env={})
    assert s.max_clock_skew_ms == 1234 and s.batch_size == 1000 and s.batch_interval_s == 300
    s = load_settings(
        None,
        env={
            "STREAMPROC_AUDIT_BATCH_SIZE": "10",
            "STREAMPROC_AUDIT_BATCH_INTERVAL_S": "2.5",
            "STREAMPROC_AUDIT_VERIFY_PERIOD_S": "0",
            "STREAMPROC_AUDIT_VERIFY_ON_START": "false",
            "STREAMPROC_AUDIT_MAX_CLOCK_SKEW_MS": "100",
        },
    )
    assert (s.batch_size, s.batch_interval_s, s.verify_period_s, s.verify_on_start) == (
        10,
        2.5,
        0,
        False,
    )
    for var, value in [("STREAMPROC_AUDIT_BATCH_SIZE", "0"), ("STREAMPROC_AUDIT_BATCH_SIZE", "x")]:
        with pytest.raises(ConfigError, match="audit settings"):
            load_settings(None, env={var: value})
