"""The registry stays the truth: it names every variable the readers read, with their
defaults; the reference doc and the example file follow it."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from streamproc import config
from streamproc.audit import settings as audit
from streamproc.audit import signing
from streamproc.bus.connect import AUTH_ENV
from streamproc.client import cli as api_cli
from streamproc.client import settings as client
from streamproc.configfile.loader import read_file
from streamproc.configfile.reference import SPEC_KEYS, render_reference
from streamproc.configfile.registry import (
    BY_ENV,
    BY_PATH,
    DOCS_BY_PATH,
    KEYS,
    RENAMED_ENV,
    SECTIONS,
)
from streamproc.feeds import settings as feeds
from streamproc.gateway import settings as gateway
from streamproc.impact.projection import DEFAULT_CACHE_MB
from streamproc.notify import cli as notify_cli
from streamproc.planner import settings as planner
from streamproc.runner import settings as runner

ROOT = Path(__file__).resolve().parents[2]
KEYS_MD = {  # names and defaults fixed when these settings were introduced
    "STREAMPROC_LEASE_TTL_S": ("lease.ttl_s", 5),
    "STREAMPROC_READMODEL_RETENTION_DAYS": ("readmodel.retention_days", 180),
    "STREAMPROC_EVENTS_MAX_AGE_DAYS": ("streams.events_max_age_days", 0),
    "STREAMPROC_EVENTS_MAX_BYTES": ("streams.events_max_bytes", 0),
    "STREAMPROC_STREAM_REPLICAS": ("streams.replicas", 0),
    "STREAMPROC_OTEL_EXPORTER": ("otel.exporter", "none"),
    "STREAMPROC_OTEL_ENDPOINT": ("otel.endpoint", ""),
    "STREAMPROC_STATUS_INTERVAL_S": ("status.interval_s", 2),
}


def defaults(struct: type[msgspec.Struct]) -> dict[str, object]:
    return msgspec.structs.asdict(struct())  # type: ignore[call-arg]


def test_every_reader_variable_is_registered_with_its_default() -> None:
    tables: list[tuple[dict[str, str], dict[str, object]]] = [
        (planner.ENV, defaults(planner.PlannerSettings)),
        (audit.ENV, defaults(audit.AuditSettings)),
        (feeds.ENV, defaults(feeds.FeedsSettings)),
        ({k: v for k, v in runner.ENV.items()}, defaults(runner.RunnerSettings)),
        (
            {k: v for k, v in config.ENV.items() if k != "node_id"},
            msgspec.structs.asdict(config.Settings(node_id="n")),
        ),
        (
            {f: gateway.ENV_PREFIX + s for s, f in gateway._SCALARS.items()},
            defaults(gateway.GatewaySettings),
        ),
        (
            {f: gateway.ENV_PREFIX + s for s, f in gateway._DPOP_SCALARS.items()},
            defaults(gateway.Dpop),
        ),
    ]
    for env_map, values in tables:
        for field, var in env_map.items():
            key = BY_ENV[var]
            expected = values[field]
            if field == "max_clock_skew_ms" and var.startswith("STREAMPROC_AUDIT"):
                expected = None  # defaults to hlc.max_skew_ms
            if field == "data_dir":
                expected = str(expected)
            assert key.default == expected, (var, key.default, expected)
    assert (
        BY_PATH["runner.retry_backoff_s"].default
        == defaults(runner.RunnerSettings)["retry_backoff_s"]
    )
    assert (
        BY_PATH["gateway.required_modes"].default
        == defaults(gateway.GatewaySettings)["required_modes"]
    )
    assert BY_PATH["impact.cache_mb"].default == DEFAULT_CACHE_MB
    names = [
        *AUTH_ENV.values(),
        signing.ENV_SIGNING_KEY,
        signing.ENV_KEY_ID,
        signing.ENV_TRUSTED_KEYS,
        gateway.ENV_FILE,
        gateway.ENV_PREFIX + "REQUIRED_MODES",
        gateway.ENV_PREFIX + "DPOP_REQUIRE_NONCE",
        gateway.ENV_PREFIX + "ISSUER",
        gateway.ENV_PREFIX + "ISSUER_KEY",
        "STREAMPROC_RUNNER_RETRY_BACKOFF_S",
        "STREAMPROC_IMPACT_WARM_ON_START",
        "STREAMPROC_FEEDSER_SECRET",
        notify_cli.TOKEN_ENV,
        api_cli.TOKEN_ENV,
        api_cli.URL_ENV,
        client.DPOP_KEY_ENV,
        client.TOKEN_URL_ENV,
        client.CLIENT_ID_ENV,
        client.CLIENT_SECRET_ENV,
        client.SCOPES_ENV,
    ]
    assert [n for n in names if n not in BY_ENV] == []
    for var, (path, default) in KEYS_MD.items():
        assert (BY_ENV[var].path, BY_ENV[var].default) == (path, default)


def test_every_env_name_in_the_code_is_registered() -> None:
    """A new ``STREAMPROC_*`` name in streamproc/ must be added to the registry."""
    used = set()
    for path in (ROOT / "streamproc").rglob("*.py"):
        used |= set(re.findall(r'"(STREAMPROC_[A-Z0-9_]*[A-Z0-9])"', path.read_text()))
    prefixes = {"STREAMPROC_GATEWAY", "STREAMPROC_RUNNER"}
    not_settings = {"STREAMPROC_CONFIG", "STREAMPROC_CRASH_AT"}  # the last: a test hook
    missing = sorted(used - set(BY_ENV) - set(RENAMED_ENV) - prefixes - not_settings)
    assert missing == [], f"add to streamproc/configfile/registry.py: {missing}"


def test_reference_doc_is_up_to_date() -> None:
    doc = ROOT / "docs" / "configuration.md"
    assert doc.read_text() == render_reference(), (
        "docs/configuration.md is stale: run `streamproc config reference --out "
        "docs/configuration.md` (make schemas)"
    )


def test_example_file_loads_and_has_every_key() -> None:
    example = ROOT / "deploy" / "streamproc.example.toml"
    assert read_file(example).problems == []
    present: set[str] = set()
    section = ""
    for line in example.read_text().splitlines():
        header = re.match(r"^#?\s*\[\[?([a-z0-9_.-]+)\]\]?\s*$", line)
        if header:
            section = header[1]
            present.add(section)
            continue
        key = re.match(r"^#?\s*([a-z0-9_]+)\s*=", line)
        if key:
            present.add(f"{section}.{key[1]}")
    for k in KEYS:
        assert k.path in present or (k.secret and k.file_path in present), k.path
    assert set(DOCS_BY_PATH) <= present
    assert set(SECTIONS) <= present


SPEC_BLOCK = [
    "authority.issuer",
    "authority.require",
    "queue.kind",
    "queue.url",
    "mongo.uri",
    "impactIndex.storage",
    "impactIndex.warmOnStart",
    "impactIndex.usageOnlyDefault",
    "limits.defaultRatePerSecond",
    "limits.defaultParallelism",
    "limits.maxJobsPerRun",
    "integrates.scannerUrl",
    "integrates.feedserWebhook",
    "integrates.vexerWebhook",
    "notifications.emitBus",
]
"""Every key of the specification's configuration block (§10), ``scheduler.`` left out."""


def test_every_key_of_the_specifications_block_is_mapped_to_ours_or_says_why() -> None:
    assert [spec for spec, _, _ in SPEC_KEYS] == SPEC_BLOCK
    for spec, ours, why in SPEC_KEYS:
        assert ours or why, spec
        for path in ours:
            assert path in BY_PATH or path in DOCS_BY_PATH, (spec, path)
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert "\n## The specification's keys\n" in text
    assert (
        "configuration.md#the-specifications-keys" in (ROOT / "docs" / "conformance.md").read_text()
    )
