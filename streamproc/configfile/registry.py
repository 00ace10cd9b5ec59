"""Every setting streamproc reads, in one table: its config-file key, environment variable,
type, default and meaning. The config file, ``streamproc config check/show``,
``docs/configuration.md`` and ``deploy/streamproc.example.toml`` all come from (or are tested
against) this table; each reader's names come from here (:func:`env_names`), and the readers
decode them from the process's one :class:`streamproc.config.Configuration`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from streamproc.names import AUDIENCE, DEFAULT_PREFIX

Type = Literal["str", "int", "float", "bool", "list[str]", "list[float]"]


@dataclass(frozen=True)
class Key:
    path: str
    """``section.name`` in the TOML file (``gateway.dpop.nonce_secret``: a nested table)."""
    env: str
    type: Type
    default: object
    """The reader's default; ``None``: unset (``default_text`` says what happens then)."""
    description: str
    secret: bool = False
    """Redacted when shown; may be given as ``<name>_file`` / ``<ENV>_FILE`` instead."""
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    default_text: str = ""

    @property
    def section(self) -> str:
        return self.path.rpartition(".")[0]

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]

    @property
    def file_path(self) -> str:
        """The key naming a file that holds this secret."""
        return f"{self.path}_file"

    @property
    def file_env(self) -> str:
        return f"{self.env}_FILE"


@dataclass(frozen=True)
class Document:
    """A structured key (a table or an array of tables) handed to its reader as parsed TOML;
    the reader's own types validate it. Its environment override is a whole file."""

    path: str
    description: str
    env_override: str


def _k(path: str, env: str, type_: Type, default: object, description: str, **kw: object) -> Key:
    return Key(path, env, type_, default, description, **kw)  # type: ignore[arg-type]  # the keyword arguments are Key fields, checked by the registry tests


SECTIONS: dict[str, str] = {
    "node": "this process",
    "nats": "the NATS connection (or the embedded server) and the subject prefix",
    "http": "the process's HTTP server (ops endpoints, gateway, console)",
    "hlc": "the hybrid logical clock",
    "projector": "folding events into RocksDB",
    "streams": "the JetStream streams `streamproc` creates",
    "lease": "active-standby roles (planner, auditor)",
    "status": "role heartbeats",
    "readmodel": "the query side",
    "otel": "OpenTelemetry traces",
    "planner": "planning runs: debounce, segments, limits, rate buckets, cron ticks",
    "runner": "running segments against the scanner",
    "scanner": "the scanner the runner calls: its kind, the policy, the KEV catalog",
    "scanner.trivy": "the `trivy` kind: Trivy on the stored SBOM (`trivy sbom FILE --format json`)",
    "scanner.grype": "the `grype` kind: Grype on the stored SBOM (`grype sbom:FILE -o json`)",
    "scanner.osv-scanner": "the `osv-scanner` kind: OSV-Scanner on the stored SBOM "
    "(`osv-scanner scan --sbom FILE --format json`)",
    "audit": "the audit chain: snapshots, signing key, trusted keys",
    "feeds": "the `feeds` role: an OSV directory watched, its changes recorded as Feedser exports",
    "impact": "the impact index",
    "sboms": "the SBOM store (`<prefix>_sboms`): every indexed SBOM as it was sent",
    "gateway": "the HTTP API: tokens, webhooks, body limits",
    "gateway.dpop": "DPoP proof checking",
    "feedser": "the `streamproc feedser export` client",
    "vexer": "the `streamproc vexer export` client",
    "client": "commands that call the gateway: DPoP key and tokens",
    "notify": "the Notify HTTP feed (gateway) and the `streamproc notify tail` client",
}

_PORT = {"minimum": 0, "maximum": 65535}

KEYS: tuple[Key, ...] = (
    # ------------------------------------------------------------------ node
    _k("node.id", "STREAMPROC_NODE_ID", "str", None,
       "HLC node id, `[A-Za-z0-9._-]{1,32}`; unique per process in a cluster",
       default_text="the host name"),
    _k("node.data_dir", "STREAMPROC_DATA_DIR", "str", "data",
       "state directories, HLC files, keys and the embedded NATS store"),
    # ------------------------------------------------------------------ nats
    _k("nats.url", "NATS_URL", "list[str]", None,
       "NATS servers (a list, or comma-separated in the environment: a cluster)",
       default_text="the data directory's embedded server on 127.0.0.1: `up` starts it, "
       "other commands connect to it (or start a temporary one when none runs)"),
    _k("nats.port", "STREAMPROC_NATS_PORT", "int", 4222,
       "port of the embedded server (loopback only; unused with `nats.url`)", **_PORT),
    _k("nats.monitor_port", "STREAMPROC_NATS_MONITOR_PORT", "int", None,
       "monitoring port of the embedded server (`/varz`, `/jsz`: its memory and JetStream's "
       "own accounting), on loopback", default_text="none", minimum=1, maximum=65535),
    _k("nats.prefix", "STREAMPROC_PREFIX", "str", DEFAULT_PREFIX,
       "subject prefix; stream names are its upper case"),
    _k("nats.user", "STREAMPROC_NATS_USER", "str", None,
       "user name (with `nats.password`)"),
    _k("nats.password", "STREAMPROC_NATS_PASSWORD", "str", None,
       "password of `nats.user`", secret=True),
    _k("nats.token", "STREAMPROC_NATS_TOKEN", "str", None,
       "authentication token (instead of user and password)", secret=True),
    _k("nats.nkey_seed_file", "STREAMPROC_NATS_NKEY_SEED_FILE", "str", None,
       "file holding an NKey user seed (`SU...`)"),
    _k("nats.creds_file", "STREAMPROC_NATS_CREDS_FILE", "str", None,
       "a `.creds` file (user JWT and NKey seed; decentralized auth)"),
    _k("nats.tls_ca", "STREAMPROC_NATS_TLS_CA", "str", None,
       "CA bundle (PEM) that verifies the servers; with it (or `nats.tls_cert`) a server "
       "that does not require TLS is refused", default_text="the system CAs, if the server "
       "requires TLS"),
    _k("nats.tls_cert", "STREAMPROC_NATS_TLS_CERT", "str", None,
       "client certificate (PEM) for servers that verify clients (with `nats.tls_key`)"),
    _k("nats.tls_key", "STREAMPROC_NATS_TLS_KEY", "str", None,
       "private key (PEM) of `nats.tls_cert`"),
    # ------------------------------------------------------------------ http
    _k("http.host", "STREAMPROC_HTTP_HOST", "str", "127.0.0.1", "address the HTTP server binds"),
    _k("http.port", "STREAMPROC_HTTP_PORT", "int", 8480, "HTTP port", **_PORT),
    _k("http.ops_host", "STREAMPROC_OPS_HOST", "str", "127.0.0.1",
       "address the ops listener binds (`/metrics`, `/healthz`, `/readyz` of a process that "
       "serves the API)"),
    _k("http.ops_port", "STREAMPROC_OPS_PORT", "int", None,
       "ops listener port of a process that serves the API (`up`, `gateway`): its metrics name "
       "tenants, so they are served only here, never on the API port; other roles serve them "
       "on `http.port`", default_text="none: such a process serves no metrics", **_PORT),
    _k("http.max_body", "STREAMPROC_HTTP_MAX_BODY", "int", 10 * 1024 * 1024,
       "request bodies above this many bytes are refused with 413", minimum=1024),
    # ------------------------------------------------------------------ hlc, projector
    _k("hlc.max_skew_ms", "STREAMPROC_MAX_CLOCK_SKEW_MS", "int", 5000,
       "remote HLC timestamps further ahead of this clock are refused", minimum=0),
    _k("hlc.reserve_ms", "STREAMPROC_HLC_RESERVE_MS", "int", 1000,
       "the clock saves a ceiling this far ahead of what it issues before using it; a restart "
       "after a crash stamps at most this far above max(wall clock, last issued)",
       minimum=1, maximum=1000),
    _k("projector.batch", "STREAMPROC_BATCH", "int", 1000,
       "events folded per batch (one RocksDB WriteBatch, one ack)", minimum=1, maximum=10000),
    _k("projector.batch_max_s", "STREAMPROC_BATCH_MAX_S", "float", 0.5,
       "while batches take longer than this to fold and commit, the next ones are smaller "
       "(down to one event), sized by the cost per event measured, and grow back to `batch` "
       "when they fit: the process's lease renewals, NATS services and other roles wait for "
       "a batch. At most a tenth of `lease.ttl_s` is used, whatever this says; the planner's "
       "impact index merges ids into its stored chunks for a fifth of it per batch, the rest "
       "later; in seconds",
       minimum=0.01, maximum=60),
    _k("projector.malloc_trim_s", "STREAMPROC_MALLOC_TRIM_S", "float", 5.0,
       "a projector whose view frees tens of MB per batch (the impact index) hands glibc's "
       "free memory back to the OS after a batch at most this often, in seconds (0: never); "
       "less often while trims are slow, so that they take at most 5 % of the time (a trim "
       "holds the process for as long as it walks the heap's free chunks)",
       minimum=0),
    _k("projector.write_buffer_mb", "STREAMPROC_WRITE_BUFFER_MB", "int", 8,
       "RocksDB memtable memory of one state directory, all its column families together, "
       "in MB (each memtable a quarter of it; 0: RocksDB's own, 64 MB per family)", minimum=0),
    _k("projector.block_cache_mb", "STREAMPROC_BLOCK_CACHE_MB", "int", 32,
       "RocksDB block cache of the process, every state directory and family together, in "
       "MB: what it keeps of table files in memory, index and filter blocks included",
       minimum=1),
    # ------------------------------------------------------------------ streams, lease, status
    _k("streams.replicas", "STREAMPROC_STREAM_REPLICAS", "int", 0,
       "stream replicas; 0 = 3 when the cluster has at least 3 nodes, else 1",
       minimum=0, maximum=5),
    _k("streams.events_max_age_days", "STREAMPROC_EVENTS_MAX_AGE_DAYS", "int", 0,
       "drop events older than this many days; 0 = keep forever", minimum=0, maximum=36600),
    _k("streams.events_max_bytes", "STREAMPROC_EVENTS_MAX_BYTES", "int", 0,
       "cap of the event stream's size in bytes (at least 8388608, the largest event); "
       "0 = unlimited", minimum=0),
    _k("lease.ttl_s", "STREAMPROC_LEASE_TTL_S", "float", 5,
       "seconds a planner or auditor lease lives without renewal before a standby takes over",
       minimum=0.5, maximum=300),
    _k("status.interval_s", "STREAMPROC_STATUS_INTERVAL_S", "float", 2,
       "role heartbeat period in seconds", minimum=0.1, maximum=300),
    _k("readmodel.retention_days", "STREAMPROC_READMODEL_RETENTION_DAYS", "int", 180,
       "days finished runs and their details stay queryable", minimum=1, maximum=36600),
    _k("otel.exporter", "STREAMPROC_OTEL_EXPORTER", "str", "none",
       "where traces go", choices=("none", "otlp", "console")),
    _k("otel.endpoint", "STREAMPROC_OTEL_ENDPOINT", "str", "",
       "OTLP/HTTP endpoint (with `otel.exporter = \"otlp\"`)"),
    # ------------------------------------------------------------------ planner
    _k("planner.debounce_s", "STREAMPROC_PLANNER_DEBOUNCE_S", "float", 30.0,
       "an export after a quiet spell plans at once; those of one tenant and source arriving "
       "within this window after a run become one run when it closes (0: each plans on its "
       "own)", minimum=0),
    _k("planner.segment_size", "STREAMPROC_PLANNER_SEGMENT_SIZE", "int", 500,
       "most images per segment", minimum=1, maximum=10000),
    _k("planner.default_rate", "STREAMPROC_PLANNER_DEFAULT_RATE", "int", 50,
       "image evaluations/s (report calls or tool runs) of a run, over all its segments and "
       "runners, whose schedules set no `limits.ratePerSecond`", minimum=1),
    _k("planner.default_parallelism", "STREAMPROC_PLANNER_DEFAULT_PARALLELISM", "int", 8,
       "shards of a run without `limits.parallelism`", minimum=1, maximum=1024),
    _k("planner.max_jobs_per_run", "STREAMPROC_PLANNER_MAX_JOBS_PER_RUN", "int", 50000,
       "images a run takes at most: the ceiling no schedule's `limits.maxJobs` may exceed "
       "(the gateway refuses more with 400; a run of a schedule recorded with more is cut "
       "here, the surplus spilling to continuation runs), and the limit of runs whose "
       "schedules set none", minimum=1),
    _k("planner.usage_only", "STREAMPROC_PLANNER_USAGE_ONLY", "bool", True,
       "event-driven resolution counts only packages used by an entrypoint, in images whose "
       "usage is known (images without usage data count every package they contain)"),
    _k("planner.spill_delay_s", "STREAMPROC_PLANNER_SPILL_DELAY_S", "float", 300.0,
       "a run's surplus over `maxJobs` is planned as a continuation run this much later",
       minimum=0),
    _k("planner.missed_ticks", "STREAMPROC_PLANNER_MISSED_TICKS", "str", "latest",
       "cron ticks missed while down: fire the latest once, none, or each up to the cap",
       choices=("latest", "none", "all-capped")),
    _k("planner.missed_ticks_cap", "STREAMPROC_PLANNER_MISSED_TICKS_CAP", "int", 10,
       "most ticks fired at once by `all-capped`", minimum=1),
    _k("planner.clock_skew_s", "STREAMPROC_PLANNER_CLOCK_SKEW_S", "float", 60.0,
       "a cron tick this late is still on time (not missed)", minimum=0),
    _k("planner.degraded_max_jobs", "STREAMPROC_PLANNER_DEGRADED_MAX_JOBS", "int", 10000,
       "images per event-driven run while the impact index is not warm", minimum=1),
    _k("planner.tenant_rate", "STREAMPROC_PLANNER_TENANT_RATE", "int", 200,
       "image evaluations/s (report calls or tool runs) of one tenant's leaky bucket, over all "
       "its runs and every runner process", minimum=1),
    _k("planner.registry_rate", "STREAMPROC_PLANNER_REGISTRY_RATE", "int", 20,
       "registry calls/s per registry host (content refresh: tag resolution and pulls), over "
       "all tenants and every runner process", minimum=1),
    _k("planner.burst_s", "STREAMPROC_PLANNER_BURST_S", "float", 1.0,
       "a bucket's burst, in seconds of its rate (at least one call): in any window of w "
       "seconds a bucket lets through at most w x rate + burst calls", minimum=0.001,
       maximum=3600),
    _k("planner.max_runs_per_pass", "STREAMPROC_PLANNER_MAX_RUNS_PER_PASS", "int", 16,
       "runs planned per reactor pass, round-robin across tenants", minimum=1),
    _k("planner.preview_sample", "STREAMPROC_PLANNER_PREVIEW_SAMPLE", "int", 20,
       "sample digests returned by a preview", minimum=0),
    _k("planner.partitions", "STREAMPROC_PLANNER_PARTITIONS", "int", 1,
       "tenant partitions the planners share (docs/planning.md, \"Partitioned planners\"): "
       "1 is one active planner for every tenant; N > 1 maps tenants to N partitions with "
       "NATS subject mapping and each planner process leases at most ceil(N / live planners) "
       "of them. Every planner and gateway must use the same value", minimum=1, maximum=256),
    _k("planner.epss_high_percentile", "STREAMPROC_PLANNER_EPSS_HIGH_PERCENTILE", "float",
       0.9, "a changed finding whose EPSS percentile is at least this ranks its images with "
       "the critical ones; a preview counts its projected delta as high-EPSS "
       "(`projectedHighEpss`)", minimum=0, maximum=1),
    # ------------------------------------------------------------------ runner, scanner
    _k("runner.workers", "STREAMPROC_RUNNER_WORKERS", "int", 2,
       "segments processed at once by one runner process", minimum=1, maximum=256),
    _k("runner.inflight", "STREAMPROC_RUNNER_INFLIGHT", "int", 8,
       "scanner calls in flight per segment (capped by the schedule's parallelism)",
       minimum=1, maximum=1024),
    _k("runner.ack_wait_s", "STREAMPROC_RUNNER_ACK_WAIT_S", "float", 30.0,
       "a segment whose runner stops heartbeating is redelivered after this long"),
    _k("runner.max_deliver", "STREAMPROC_RUNNER_MAX_DELIVER", "int", 5,
       "attempts of one segment", minimum=1, maximum=100),
    _k("runner.retry_backoff_s", "STREAMPROC_RUNNER_RETRY_BACKOFF_S", "list[float]",
       [1.0, 5.0, 15.0, 60.0], "delay before redelivering a failed segment, by attempt"),
    _k("runner.call_timeout_s", "STREAMPROC_RUNNER_CALL_TIMEOUT_S", "float", 10.0,
       "timeout of one scanner call"),
    _k("runner.call_attempts", "STREAMPROC_RUNNER_CALL_ATTEMPTS", "int", 8,
       "attempts of one scanner call on transient errors", minimum=1, maximum=100),
    _k("runner.call_budget_s", "STREAMPROC_RUNNER_CALL_BUDGET_S", "float", 60.0,
       "time one image may spend retrying before the segment attempt fails"),
    _k("scanner.url", "STREAMPROC_SCANNER_URL", "str", "http://127.0.0.1:8490",
       "scanner base URL (unset: `streamproc up --demo` starts the reference scanner on "
       "`scanner.port`)"),
    _k("scanner.port", "STREAMPROC_SCANNER_PORT", "int", 8490,
       "loopback port of the reference scanner `streamproc up --demo` starts when "
       "`scanner.url` is unset (the runners then call it there)", minimum=1, maximum=65535),
    _k("scanner.kind", "STREAMPROC_SCANNER_KIND", "str", "stella",
       "what answers the runners: `stella` (a `/reports` service at `scanner.url`), or a "
       "tool run on the stored SBOM", choices=("stella", "trivy", "grype", "osv-scanner")),
    _k("scanner.kev_catalog", "STREAMPROC_SCANNER_KEV_CATALOG", "str", None,
       "a CISA KEV catalog file (JSON): findings whose id or alias it lists are KEV (re-read "
       "when it changes)", default_text="none: only what the tool itself marks"),
    _k("scanner.fail_on", "STREAMPROC_SCANNER_FAIL_ON", "str", "high",
       "the policy: a verdict FAILs with a finding of this severity or above, or a KEV one",
       choices=("low", "medium", "high", "critical")),
    _k("scanner.trivy.path", "STREAMPROC_SCANNER_TRIVY_PATH", "str", "trivy",
       "the Trivy executable: a name looked up on PATH, or a path"),
    _k("scanner.trivy.args", "STREAMPROC_SCANNER_TRIVY_ARGS", "str", "",
       "extra arguments after the fixed ones, split into words as a POSIX shell would "
       "(no shell runs)"),
    _k("scanner.trivy.timeout_s", "STREAMPROC_SCANNER_TRIVY_TIMEOUT_S", "float", 120.0,
       "a Trivy call running longer is killed (its whole process group) and counts as "
       "`timeout`", minimum=0.001),
    _k("scanner.trivy.concurrency", "STREAMPROC_SCANNER_TRIVY_CONCURRENCY", "int", 2,
       "Trivy processes one runner process runs at once", minimum=1, maximum=64),
    _k("scanner.trivy.server", "STREAMPROC_SCANNER_TRIVY_SERVER", "str", None,
       "a `trivy server` URL: the runners pass `--server URL`, and the server holds the DB",
       default_text="none: each call reads the local DB"),
    _k("scanner.grype.path", "STREAMPROC_SCANNER_GRYPE_PATH", "str", "grype",
       "the Grype executable: a name looked up on PATH, or a path"),
    _k("scanner.grype.args", "STREAMPROC_SCANNER_GRYPE_ARGS", "str", "",
       "extra arguments after the fixed ones, split into words as a POSIX shell would "
       "(no shell runs)"),
    _k("scanner.grype.timeout_s", "STREAMPROC_SCANNER_GRYPE_TIMEOUT_S", "float", 120.0,
       "a Grype call running longer is killed (its whole process group) and counts as "
       "`timeout`", minimum=0.001),
    _k("scanner.grype.concurrency", "STREAMPROC_SCANNER_GRYPE_CONCURRENCY", "int", 2,
       "Grype processes one runner process runs at once", minimum=1, maximum=64),
    _k("scanner.osv-scanner.path", "STREAMPROC_SCANNER_OSV_SCANNER_PATH", "str", "osv-scanner",
       "the OSV-Scanner executable: a name looked up on PATH, or a path"),
    _k("scanner.osv-scanner.args", "STREAMPROC_SCANNER_OSV_SCANNER_ARGS", "str", "",
       "extra arguments after the fixed ones, split into words as a POSIX shell would "
       "(no shell runs)"),
    _k("scanner.osv-scanner.timeout_s", "STREAMPROC_SCANNER_OSV_SCANNER_TIMEOUT_S", "float", 120.0,
       "an OSV-Scanner call running longer is killed (its whole process group) and counts as "
       "`timeout`", minimum=0.001),
    _k("scanner.osv-scanner.concurrency", "STREAMPROC_SCANNER_OSV_SCANNER_CONCURRENCY", "int", 2,
       "OSV-Scanner processes one runner process runs at once", minimum=1, maximum=64),
    # ------------------------------------------------------------------ sboms
    _k("sboms.retention_s", "STREAMPROC_SBOMS_RETENTION_S", "float", 86400.0,
       "an SBOM no indexed image uses any more is deleted from the SBOM store this many "
       "seconds after the last image using it was removed (or re-indexed with another SBOM), "
       "and never sooner than this long after it was last stored; the active planner deletes",
       minimum=1),
    # ------------------------------------------------------------------ audit
    _k("audit.batch_size", "STREAMPROC_AUDIT_BATCH_SIZE", "int", 1000,
       "chain entries per signed batch snapshot", minimum=1, maximum=100000),
    _k("audit.batch_interval_s", "STREAMPROC_AUDIT_BATCH_INTERVAL_S", "float", 300.0,
       "snapshot at least this often while entries wait"),
    _k("audit.verify_period_s", "STREAMPROC_AUDIT_VERIFY_PERIOD_S", "float", 3600.0,
       "full chain verification period (0: at start only)", minimum=0),
    _k("audit.verify_on_start", "STREAMPROC_AUDIT_VERIFY_ON_START", "bool", True,
       "verify every chain when the auditor starts"),
    _k("audit.max_clock_skew_ms", "STREAMPROC_AUDIT_MAX_CLOCK_SKEW_MS", "int", None,
       "entries whose HLC is further ahead of the auditor's clock are held", minimum=0,
       default_text="`hlc.max_skew_ms`"),
    _k("audit.signing_key", "STREAMPROC_AUDIT_SIGNING_KEY", "str", None,
       "Ed25519 seed of the snapshot signatures: 64 hex digits or base64", secret=True,
       default_text="generated once into `DATA/keys/audit-ed25519.seed`"),
    _k("audit.key_id", "STREAMPROC_AUDIT_KEY_ID", "str", None,
       "key id put in signatures", default_text="`audit-` and 16 hex digits of the key's hash"),
    _k("audit.trusted_keys", "STREAMPROC_AUDIT_TRUSTED_KEYS", "list[str]", None,
       "other public keys to accept (`keyid=BASE64`), e.g. keys rotated out",
       default_text="none"),
    # ------------------------------------------------------------------ impact
    _k("impact.cache_mb", "STREAMPROC_IMPACT_CACHE_MB", "int", 640,
       "memory bound of the impact index cache in MB (0 or less: unbounded)"),
    _k("impact.warm_on_start", "STREAMPROC_IMPACT_WARM_ON_START", "bool", True,
       "load the impact index into memory at start (degraded planning until warm)"),
    # ------------------------------------------------------------------ gateway
    _k("gateway.config", "STREAMPROC_GATEWAY_CONFIG", "str", None,
       "a JSON or TOML gateway file (the gateway keys without the `gateway.` prefix); its "
       "keys override the `gateway` tables of this file", default_text="none"),
    _k("gateway.audience", "STREAMPROC_GATEWAY_AUDIENCE", "str", AUDIENCE,
       "the `aud` tokens must carry"),
    _k("gateway.required_modes", "STREAMPROC_GATEWAY_REQUIRED_MODES", "list[str]",
       ["dpop", "mtls"], "accepted ways to present a token (`bearer`: unbound tokens, dev only)",
       choices=("bearer", "dpop", "mtls")),
    _k("gateway.leeway_s", "STREAMPROC_GATEWAY_LEEWAY_S", "int", 30,
       "clock leeway for token times", minimum=0, maximum=300),
    _k("gateway.max_token_lifetime_s", "STREAMPROC_GATEWAY_MAX_TOKEN_LIFETIME_S", "int", 86400,
       "longest accepted `exp - iat` of an access token (tokens without `iat` are refused)",
       minimum=60, maximum=30 * 86400),
    _k("gateway.token_types", "STREAMPROC_GATEWAY_TOKEN_TYPES", "list[str]", ["at+jwt"],
       "accepted access-token `typ` values (RFC 9068 `at+jwt`; `JWT` only for an issuer that "
       "cannot say `at+jwt`)"),
    _k("gateway.public_base_url", "STREAMPROC_GATEWAY_PUBLIC_BASE_URL", "str", None,
       "external origin (`https://host[:port]`) for DPoP `htu` behind a proxy",
       default_text="the request's own"),
    _k("gateway.webhook_window_s", "STREAMPROC_GATEWAY_WEBHOOK_WINDOW_S", "int", 300,
       "webhook timestamps further off are refused", minimum=30, maximum=3600),
    _k("gateway.replay_cache_size", "STREAMPROC_GATEWAY_REPLAY_CACHE_SIZE", "int", 3000000,
       "live webhook delivery ids and DPoP proof ids the replay bucket shared by every "
       "gateway replica holds (more: 503)", minimum=1000),
    _k("gateway.replay_per_client", "STREAMPROC_GATEWAY_REPLAY_PER_CLIENT", "int", 100000,
       "live ids one client (a webhook source, a DPoP key) may hold through one gateway "
       "(more: 429)", minimum=10),
    _k("gateway.max_body", "STREAMPROC_GATEWAY_MAX_BODY", "int", None,
       "compressed (on the wire) body cap in bytes", minimum=1024,
       default_text="`http.max_body`"),
    _k("gateway.max_decompressed_body", "STREAMPROC_GATEWAY_MAX_DECOMPRESSED_BODY", "int", None,
       "body cap after gzip/zstd decoding", minimum=1024, default_text="`gateway.max_body`"),
    _k("gateway.wait_timeout_s", "STREAMPROC_GATEWAY_WAIT_TIMEOUT_S", "float", 10.0,
       "longest `wait` a write request may ask for; also how long a request naming a run or "
       "schedule not yet found waits for the read model to apply the log before its 404"),
    _k("gateway.preview_timeout_s", "STREAMPROC_GATEWAY_PREVIEW_TIMEOUT_S", "float", 5.0,
       "deadline of an impact preview asked of the planners over NATS (then 503)",
       minimum=0.001, maximum=120),
    _k("gateway.verify_timeout_s", "STREAMPROC_GATEWAY_VERIFY_TIMEOUT_S", "float", 120.0,
       "deadline of a chain verification asked of the auditors over NATS (then 503)",
       minimum=0.001, maximum=600),
    _k("gateway.access_log", "STREAMPROC_GATEWAY_ACCESS_LOG", "str", "stderr",
       "`stderr`, a file path (JSON lines), `logger` or `off`"),
    _k("gateway.issuer", "STREAMPROC_GATEWAY_ISSUER", "str", None,
       "one more token issuer (`iss`), with `gateway.issuer_key`", default_text="none"),
    _k("gateway.issuer_key", "STREAMPROC_GATEWAY_ISSUER_KEY", "str", None,
       "`kid=PUBLIC_KEY` (Ed25519, base64url) of `gateway.issuer`", default_text="none"),
    _k("gateway.issuer_tenants", "STREAMPROC_GATEWAY_ISSUER_TENANTS", "list[str]", None,
       "the tenants `gateway.issuer` may speak for: tenant ids, `prefix*` patterns or `*` "
       "(required with `gateway.issuer`)", default_text="none"),
    _k("gateway.dpop.require_nonce", "STREAMPROC_GATEWAY_DPOP_REQUIRE_NONCE", "bool", True,
       "DPoP proofs must carry a server nonce"),
    _k("gateway.dpop.nonce_secret", "STREAMPROC_GATEWAY_DPOP_NONCE_SECRET", "str", None,
       "HMAC key of the stateless nonces; share it between gateway replicas", secret=True,
       default_text="random per process"),
    _k("gateway.dpop.nonce_ttl_s", "STREAMPROC_GATEWAY_DPOP_NONCE_TTL_S", "int", 300,
       "nonce lifetime", minimum=10, maximum=3600),
    _k("gateway.dpop.iat_window_s", "STREAMPROC_GATEWAY_DPOP_IAT_WINDOW_S", "int", 60,
       "proof `iat` further off is refused", minimum=5, maximum=600),
    # ------------------------------------------------------------------ feeds
    _k("feeds.osv_dir", "STREAMPROC_FEEDS_OSV_DIR", "str", None,
       "directory of OSV advisories (`*.json`) the `feeds` role watches; new or changed "
       "advisories are recorded as a Feedser export for each of `feeds.tenants`",
       default_text="unset: the role runs and records nothing"),
    _k("feeds.tenants", "STREAMPROC_FEEDS_TENANTS", "list[str]", [],
       "tenants each export is recorded for (at least one when `feeds.osv_dir` is set)"),
    _k("feeds.poll_interval_s", "STREAMPROC_FEEDS_POLL_INTERVAL_S", "float", 60.0,
       "seconds between two reads of the directory", minimum=1, maximum=86400),
    _k("feeds.kev_file", "STREAMPROC_FEEDS_KEV_FILE", "str", None,
       "CISA KEV catalog JSON: marks the KEV ids among the advisories", default_text="none"),
    _k("feeds.epss_file", "STREAMPROC_FEEDS_EPSS_FILE", "str", None,
       "FIRST's EPSS scores CSV (gzipped or not): each advisory's EPSS", default_text="none"),
    _k("feeds.debian_sources", "STREAMPROC_FEEDS_DEBIAN_SOURCES", "str", None,
       "Debian binary→source package map (JSON `binaryToSource`): expands Debian advisories "
       "to their binary packages", default_text="none"),
    # ------------------------------------------------------------------ clients
    _k("feedser.secret", "STREAMPROC_FEEDSER_SECRET", "str", None,
       "HMAC secret `streamproc feedser export` signs with", secret=True, default_text="none"),
    _k("feedser.token", "STREAMPROC_FEEDSER_TOKEN", "str", None,
       "access token `streamproc feedser export` presents (scope `scheduler.webhook`, one "
       "tenant), DPoP-bound to the client's key (`client.dpop_key`)", secret=True,
       default_text="client credentials (`client.*`), else minted from `feedser.issuer_key`"),
    _k("feedser.issuer_key", "STREAMPROC_FEEDSER_ISSUER_KEY", "str", None,
       "issuer key file `streamproc feedser export` mints its tokens from (development and "
       "tests)", default_text="`DATA/dev/issuer.jwk` when `make run` wrote it"),
    _k("feedser.tenants", "STREAMPROC_FEEDSER_TENANTS", "list[str]", None,
       "tenants `streamproc feedser export` delivers each export to, one delivery and token "
       "each (minted or client-credentials tokens)",
       default_text="the Feedser source's tenants in `DATA/dev/gateway.json`"),
    _k("vexer.secret", "STREAMPROC_VEXER_SECRET", "str", None,
       "HMAC secret `streamproc vexer export` signs with", secret=True, default_text="none"),
    _k("vexer.token", "STREAMPROC_VEXER_TOKEN", "str", None,
       "access token `streamproc vexer export` presents (scope `scheduler.webhook`, one "
       "tenant), DPoP-bound to the client's key (`client.dpop_key`)", secret=True,
       default_text="client credentials (`client.*`), else minted from `vexer.issuer_key`"),
    _k("vexer.issuer_key", "STREAMPROC_VEXER_ISSUER_KEY", "str", None,
       "issuer key file `streamproc vexer export` mints its tokens from (development and "
       "tests)", default_text="`DATA/dev/issuer.jwk` when `make run` wrote it"),
    _k("vexer.tenants", "STREAMPROC_VEXER_TENANTS", "list[str]", None,
       "tenants `streamproc vexer export` delivers each export to, one delivery and token "
       "each (minted or client-credentials tokens)",
       default_text="the Vexer source's tenants in `DATA/dev/gateway.json`"),
    _k("client.dpop_key", "STREAMPROC_CLIENT_DPOP_KEY", "str", None,
       "the DPoP key (private Ed25519 JWK) every command that calls the gateway signs its "
       "proofs with; created on first use with mode 0600",
       default_text="`<data_dir>/client/dpop.jwk`"),
    _k("client.token", "STREAMPROC_TOKEN", "str", None,
       "static access token of `streamproc api`, bound to the client's DPoP key",
       secret=True, default_text="none"),
    _k("client.api_url", "STREAMPROC_API_URL", "str", None,
       "the gateway `streamproc api` calls",
       default_text="`http://<http.host>:<http.port>`: the one `streamproc up` serves"),
    _k("client.token_url", "STREAMPROC_CLIENT_TOKEN_URL", "str", None,
       "the issuer's OAuth 2.0 token endpoint: commands without a static token get "
       "DPoP-bound tokens there with client credentials, one per tenant", default_text="none"),
    _k("client.client_id", "STREAMPROC_CLIENT_ID", "str", None,
       "client id at `client.token_url` (HTTP Basic)", default_text="none"),
    _k("client.client_secret", "STREAMPROC_CLIENT_SECRET", "str", None,
       "client secret at `client.token_url`", secret=True, default_text="none"),
    _k("client.scopes", "STREAMPROC_CLIENT_SCOPES", "list[str]", None,
       "scopes asked of `client.token_url`",
       default_text="what the command needs (`notify tail`: `scheduler.read`)"),
    _k("notify.token", "STREAMPROC_NOTIFY_TOKEN", "str", None,
       "static access token of `streamproc notify tail --http`, bound to the client's DPoP "
       "key (instead of client credentials; one tenant)", secret=True, default_text="none"),
    _k("notify.consumer_client_ids", "STREAMPROC_NOTIFY_CONSUMER_CLIENT_IDS", "list[str]",
       ["streamproc-notify"],
       "the HTTP feed's consumer: tokens whose `client_id`, `azp` or `sub` is one of these may "
       "register and report positions (anyone else: 403)"),
    _k("notify.feed_lease_s", "STREAMPROC_FEED_LEASE_S", "float", 86400.0,
       "how long the feed keeps a consumer's registration, and holds what it has not reported, "
       "without a new report", minimum=3),
    _k("notify.max_age_s", "STREAMPROC_NOTIFY_MAX_AGE_S", "int", 86400,
       "the Notify stream's delivery window: every message is kept this long (what an "
       "unregistered reader gets)", minimum=10),
    _k("notify.max_retention_s", "STREAMPROC_NOTIFY_MAX_RETENTION_S", "int", 604800,
       "the hold's limit: a message a live registration (or a NATS durable consumer) has not "
       "reported is kept up to this long (the stream's `max_age`; at least `notify.max_age_s`)",
       minimum=10),
    _k("notify.base_url", "STREAMPROC_NOTIFY_BASE_URL", "str", None,
       "`notify tail --http`: the feed's owner (the gateway), an absolute http(s) URL without "
       "credentials, query or fragment", default_text="none (`--http URL`)"),
    _k("notify.tenants", "STREAMPROC_NOTIFY_TENANTS", "list[str]", None,
       "`notify tail --http`: the tenants to follow, one partition each (ASCII letters, digits, "
       "`-`, `_`; lowered; distinct)", default_text="a static token's tenant; else required"),
    _k("notify.poll_interval_s", "STREAMPROC_NOTIFY_POLL_INTERVAL_S", "float", 15.0,
       "`notify tail --http`: the pause between polls once every partition is caught up",
       minimum=0.001),
    _k("notify.batch_size", "STREAMPROC_NOTIFY_BATCH_SIZE", "int", 50,
       "`notify tail --http`: events per partition and request", minimum=1, maximum=500),
    _k("notify.http_timeout_s", "STREAMPROC_NOTIFY_HTTP_TIMEOUT_S", "float", 30.0,
       "`notify tail --http`: timeout of each request to the feed", minimum=0.001),
    _k("notify.lease_ttl_s", "STREAMPROC_NOTIFY_LEASE_TTL_S", "float", 120.0,
       "`notify tail --http`: a partition's processing lease, renewed while its events are "
       "handled (another consumer on the same state waits it out)", minimum=3),
)  # fmt: skip

DOCUMENTS: tuple[Document, ...] = (
    Document(
        "gateway.issuers",
        "token issuers: `[[gateway.issuers]]` with `issuer`, `tenants` (ids, `prefix*` "
        "patterns or `*`: whom its tokens may speak for) and `keys = [{ kid, public_key }]`",
        "STREAMPROC_GATEWAY_CONFIG",
    ),
    Document(
        "gateway.webhooks",
        "webhook sources: `[[gateway.webhooks]]` with `name`, `kind`, `tenants` and "
        "`hmac_secrets`, `ed25519_public_keys` or an `mtls` table",
        "STREAMPROC_GATEWAY_CONFIG",
    ),
    Document(
        "gateway.tls",
        "an HTTPS listener for the gateway (needed for mTLS): `host`, `port`, `cert_file`, "
        "`key_file`, `client_ca_files`",
        "STREAMPROC_GATEWAY_CONFIG",
    ),
)

RENAMED: dict[str, str] = {"planner.default_max_jobs": "planner.max_jobs_per_run"}
"""Keys of earlier versions, and the key each became: a file using one is refused with it."""
RENAMED_ENV: dict[str, str] = {
    "STREAMPROC_PLANNER_DEFAULT_MAX_JOBS": "STREAMPROC_PLANNER_MAX_JOBS_PER_RUN"
}
"""Their variables: set, they stop the process that reads the new one, naming it."""

CONFIG_ENV = "STREAMPROC_CONFIG"
"""Names the config file when ``--config`` is not given."""

BY_PATH: dict[str, Key] = {k.path: k for k in KEYS}
BY_ENV: dict[str, Key] = {k.env: k for k in KEYS}
DOCS_BY_PATH: dict[str, Document] = {d.path: d for d in DOCUMENTS}
SECRET_FILES: dict[str, Key] = {k.file_path: k for k in KEYS if k.secret}


def env_name(path: str) -> str:
    """The environment name of the key at ``path`` (a ``KeyError`` at import if none)."""
    return BY_PATH[path].env


def env_names(section: str, fields: Iterable[str] | Mapping[str, str]) -> dict[str, str]:
    """A settings type's field → the environment name of its key: a field's key is
    ``<section>.<field>`` unless ``fields`` maps it to another path. Each environment name is
    written once, here in :data:`KEYS`; a field without a key is a ``KeyError`` at import."""
    paths = fields if isinstance(fields, Mapping) else {f: f"{section}.{f}" for f in fields}
    return {field: BY_PATH[path].env for field, path in paths.items()}


def all_paths() -> list[str]:
    """Every name a file may use: keys, ``<secret>_file`` keys, documents and sections."""
    return [*BY_PATH, *SECRET_FILES, *DOCS_BY_PATH, *SECTIONS]


def known_env() -> set[str]:
    """Every environment variable streamproc reads."""
    return {*BY_ENV, *(k.file_env for k in KEYS if k.secret), CONFIG_ENV}


def _check_registry() -> None:
    """Names must not collide (a secret's ``_file`` key with a real key, two env names)."""
    assert len(BY_PATH) == len(KEYS) and len(BY_ENV) == len(KEYS), "duplicate key or env"
    assert not set(SECRET_FILES) & set(BY_PATH), "a secret's _file key is also a key"
    for k in KEYS:
        assert k.section in SECTIONS, f"{k.path}: section {k.section} undeclared"


_check_registry()
