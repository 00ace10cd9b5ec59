"""Every setting as one typed object: a Struct per section, a field per key.

Generated from ``streamproc/configfile/registry.py`` by ``make schemas``
(``python -m streamproc.configfile.generate``); do not edit. The process's one
:class:`streamproc.config.Configuration` decodes the config file and the environment into
:class:`Sections` once, at start (:mod:`streamproc.configfile.typed`).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec


def _masked(struct: msgspec.Struct, secrets: tuple[str, ...]) -> str:
    """A section's repr with its secrets' values left out, so that logging or printing the
    settings never shows a password, a key or a token."""
    shown = (
        f"{f}=<set>" if f in secrets and getattr(struct, f) is not None
        else f"{f}={getattr(struct, f)!r}"
        for f in struct.__struct_fields__
    )  # fmt: skip
    return f"{type(struct).__name__}({', '.join(shown)})"


class Node(msgspec.Struct, frozen=True, kw_only=True):
    """[node]: this process."""

    # STREAMPROC_NODE_ID: HLC node id, `[A-Za-z0-9._-]{1,32}`; unique per process in a cluster
    id: str | None = None
    # STREAMPROC_DATA_DIR: state directories, HLC files, keys and the embedded NATS store
    data_dir: str = "data"


class Nats(msgspec.Struct, frozen=True, kw_only=True):
    """[nats]: the NATS connection (or the embedded server) and the subject prefix."""

    # NATS_URL: NATS servers (a list, or comma-separated in the environment: a cluster)
    url: tuple[str, ...] | None = None
    # STREAMPROC_NATS_PORT: port of the embedded server (loopback only; unused with `nats.url`)
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 4222
    # STREAMPROC_NATS_MONITOR_PORT: monitoring port of the embedded server (`/varz`, `/jsz`: its
    # memory and JetStream's own accounting), on loopback
    monitor_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None
    # STREAMPROC_PREFIX: subject prefix; stream names are its upper case
    prefix: str = "scheduler"
    # STREAMPROC_NATS_USER: user name (with `nats.password`)
    user: str | None = None
    # STREAMPROC_NATS_PASSWORD: password of `nats.user`
    password: str | None = None
    # STREAMPROC_NATS_TOKEN: authentication token (instead of user and password)
    token: str | None = None
    # STREAMPROC_NATS_NKEY_SEED_FILE: file holding an NKey user seed (`SU...`)
    nkey_seed_file: str | None = None
    # STREAMPROC_NATS_CREDS_FILE: a `.creds` file (user JWT and NKey seed; decentralized auth)
    creds_file: str | None = None
    # STREAMPROC_NATS_TLS_CA: CA bundle (PEM) that verifies the servers; with it (or
    # `nats.tls_cert`) a server that does not require TLS is refused
    tls_ca: str | None = None
    # STREAMPROC_NATS_TLS_CERT: client certificate (PEM) for servers that verify clients (with
    # `nats.tls_key`)
    tls_cert: str | None = None
    # STREAMPROC_NATS_TLS_KEY: private key (PEM) of `nats.tls_cert`
    tls_key: str | None = None

    def __repr__(self) -> str:
        return _masked(self, ("password", "token"))


class Http(msgspec.Struct, frozen=True, kw_only=True):
    """[http]: the process's HTTP server (ops endpoints, gateway, console)."""

    # STREAMPROC_HTTP_HOST: address the HTTP server binds
    host: str = "127.0.0.1"
    # STREAMPROC_HTTP_PORT: HTTP port
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8480
    # STREAMPROC_OPS_HOST: address the ops listener binds (`/metrics`, `/healthz`, `/readyz` of a
    # process that serves the API)
    ops_host: str = "127.0.0.1"
    # STREAMPROC_OPS_PORT: ops listener port of a process that serves the API (`up`, `gateway`):
    # its metrics name tenants, so they are served only here, never on the API port; other roles
    # serve them on `http.port`
    ops_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] | None = None
    # STREAMPROC_HTTP_MAX_BODY: request bodies above this many bytes are refused with 413
    max_body: Annotated[int, msgspec.Meta(ge=1024)] = 10485760


class Hlc(msgspec.Struct, frozen=True, kw_only=True):
    """[hlc]: the hybrid logical clock."""

    # STREAMPROC_MAX_CLOCK_SKEW_MS: remote HLC timestamps further ahead of this clock are refused
    max_skew_ms: Annotated[int, msgspec.Meta(ge=0)] = 5000
    # STREAMPROC_HLC_RESERVE_MS: the clock saves a ceiling this far ahead of what it issues before
    # using it; a restart after a crash stamps at most this far above max(wall clock, last issued)
    reserve_ms: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 1000


class Projector(msgspec.Struct, frozen=True, kw_only=True):
    """[projector]: folding events into RocksDB."""

    # STREAMPROC_BATCH: events folded per batch (one RocksDB WriteBatch, one ack)
    batch: Annotated[int, msgspec.Meta(ge=1, le=10000)] = 1000
    # STREAMPROC_BATCH_MAX_S: while batches take longer than this to fold and commit, the next
    # ones are smaller (down to one event), sized by the cost per event measured, and grow back to
    # `batch` when they fit: the process's lease renewals, NATS services and other roles wait for
    # a batch. At most a tenth of `lease.ttl_s` is used, whatever this says; the planner's impact
    # index merges ids into its stored chunks for a fifth of it per batch, the rest later; in
    # seconds
    batch_max_s: Annotated[float, msgspec.Meta(ge=0.01, le=60.0)] = 0.5
    # STREAMPROC_MALLOC_TRIM_S: a projector whose view frees tens of MB per batch (the impact
    # index) hands glibc's free memory back to the OS after a batch at most this often, in seconds
    # (0: never); less often while trims are slow, so that they take at most 5 % of the time (a
    # trim holds the process for as long as it walks the heap's free chunks)
    malloc_trim_s: Annotated[float, msgspec.Meta(ge=0.0)] = 5.0
    # STREAMPROC_WRITE_BUFFER_MB: RocksDB memtable memory of one state directory, all its column
    # families together, in MB (each memtable a quarter of it; 0: RocksDB's own, 64 MB per family)
    write_buffer_mb: Annotated[int, msgspec.Meta(ge=0)] = 8
    # STREAMPROC_BLOCK_CACHE_MB: RocksDB block cache of the process, every state directory and
    # family together, in MB: what it keeps of table files in memory, index and filter blocks
    # included
    block_cache_mb: Annotated[int, msgspec.Meta(ge=1)] = 32


class Streams(msgspec.Struct, frozen=True, kw_only=True):
    """[streams]: the JetStream streams `streamproc` creates."""

    # STREAMPROC_STREAM_REPLICAS: stream replicas; 0 = 3 when the cluster has at least 3 nodes,
    # else 1
    replicas: Annotated[int, msgspec.Meta(ge=0, le=5)] = 0
    # STREAMPROC_EVENTS_MAX_AGE_DAYS: drop events older than this many days; 0 = keep forever
    events_max_age_days: Annotated[int, msgspec.Meta(ge=0, le=36600)] = 0
    # STREAMPROC_EVENTS_MAX_BYTES: cap of the event stream's size in bytes (at least 8388608, the
    # largest event); 0 = unlimited
    events_max_bytes: Annotated[int, msgspec.Meta(ge=0)] = 0


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    """[lease]: active-standby roles (planner, auditor)."""

    # STREAMPROC_LEASE_TTL_S: seconds a planner or auditor lease lives without renewal before a
    # standby takes over
    ttl_s: Annotated[float, msgspec.Meta(ge=0.5, le=300.0)] = 5.0


class Status(msgspec.Struct, frozen=True, kw_only=True):
    """[status]: role heartbeats."""

    # STREAMPROC_STATUS_INTERVAL_S: role heartbeat period in seconds
    interval_s: Annotated[float, msgspec.Meta(ge=0.1, le=300.0)] = 2.0


class Readmodel(msgspec.Struct, frozen=True, kw_only=True):
    """[readmodel]: the query side."""

    # STREAMPROC_READMODEL_RETENTION_DAYS: days finished runs and their details stay queryable
    retention_days: Annotated[int, msgspec.Meta(ge=1, le=36600)] = 180


class Otel(msgspec.Struct, frozen=True, kw_only=True):
    """[otel]: OpenTelemetry traces."""

    # STREAMPROC_OTEL_EXPORTER: where traces go
    exporter: Literal["none", "otlp", "console"] = "none"
    # STREAMPROC_OTEL_ENDPOINT: OTLP/HTTP endpoint (with `otel.exporter = "otlp"`)
    endpoint: str = ""


class Planner(msgspec.Struct, frozen=True, kw_only=True):
    """[planner]: planning runs: debounce, segments, limits, rate buckets, cron ticks."""

    # STREAMPROC_PLANNER_DEBOUNCE_S: an export after a quiet spell plans at once; those of one
    # tenant and source arriving within this window after a run become one run when it closes (0:
    # each plans on its own)
    debounce_s: Annotated[float, msgspec.Meta(ge=0.0)] = 30.0
    # STREAMPROC_PLANNER_SEGMENT_SIZE: most images per segment
    segment_size: Annotated[int, msgspec.Meta(ge=1, le=10000)] = 500
    # STREAMPROC_PLANNER_DEFAULT_RATE: image evaluations/s (report calls or tool runs) of a run,
    # over all its segments and runners, whose schedules set no `limits.ratePerSecond`
    default_rate: Annotated[int, msgspec.Meta(ge=1)] = 50
    # STREAMPROC_PLANNER_DEFAULT_PARALLELISM: shards of a run without `limits.parallelism`
    default_parallelism: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 8
    # STREAMPROC_PLANNER_MAX_JOBS_PER_RUN: images a run takes at most: the ceiling no schedule's
    # `limits.maxJobs` may exceed (the gateway refuses more with 400; a run of a schedule recorded
    # with more is cut here, the surplus spilling to continuation runs), and the limit of runs
    # whose schedules set none
    max_jobs_per_run: Annotated[int, msgspec.Meta(ge=1)] = 50000
    # STREAMPROC_PLANNER_USAGE_ONLY: event-driven resolution counts only packages used by an
    # entrypoint, in images whose usage is known (images without usage data count every package
    # they contain)
    usage_only: bool = True
    # STREAMPROC_PLANNER_SPILL_DELAY_S: a run's surplus over `maxJobs` is planned as a
    # continuation run this much later
    spill_delay_s: Annotated[float, msgspec.Meta(ge=0.0)] = 300.0
    # STREAMPROC_PLANNER_MISSED_TICKS: cron ticks missed while down: fire the latest once, none,
    # or each up to the cap
    missed_ticks: Literal["latest", "none", "all-capped"] = "latest"
    # STREAMPROC_PLANNER_MISSED_TICKS_CAP: most ticks fired at once by `all-capped`
    missed_ticks_cap: Annotated[int, msgspec.Meta(ge=1)] = 10
    # STREAMPROC_PLANNER_CLOCK_SKEW_S: a cron tick this late is still on time (not missed)
    clock_skew_s: Annotated[float, msgspec.Meta(ge=0.0)] = 60.0
    # STREAMPROC_PLANNER_DEGRADED_MAX_JOBS: images per event-driven run while the impact index is
    # not warm
    degraded_max_jobs: Annotated[int, msgspec.Meta(ge=1)] = 10000
    # STREAMPROC_PLANNER_TENANT_RATE: image evaluations/s (report calls or tool runs) of one
    # tenant's leaky bucket, over all its runs and every runner process
    tenant_rate: Annotated[int, msgspec.Meta(ge=1)] = 200
    # STREAMPROC_PLANNER_REGISTRY_RATE: registry calls/s per registry host (content refresh: tag
    # resolution and pulls), over all tenants and every runner process
    registry_rate: Annotated[int, msgspec.Meta(ge=1)] = 20
    # STREAMPROC_PLANNER_BURST_S: a bucket's burst, in seconds of its rate (at least one call): in
    # any window of w seconds a bucket lets through at most w x rate + burst calls
    burst_s: Annotated[float, msgspec.Meta(ge=0.001, le=3600.0)] = 1.0
    # STREAMPROC_PLANNER_MAX_RUNS_PER_PASS: runs planned per reactor pass, round-robin across
    # tenants
    max_runs_per_pass: Annotated[int, msgspec.Meta(ge=1)] = 16
    # STREAMPROC_PLANNER_PREVIEW_SAMPLE: sample digests returned by a preview
    preview_sample: Annotated[int, msgspec.Meta(ge=0)] = 20
    # STREAMPROC_PLANNER_PARTITIONS: tenant partitions the planners share (docs/planning.md,
    # "Partitioned planners"): 1 is one active planner for every tenant; N > 1 maps tenants to N
    # partitions with NATS subject mapping and each planner process leases at most ceil(N / live
    # planners) of them. Every planner and gateway must use the same value
    partitions: Annotated[int, msgspec.Meta(ge=1, le=256)] = 1
    # STREAMPROC_PLANNER_EPSS_HIGH_PERCENTILE: a changed finding whose EPSS percentile is at least
    # this ranks its images with the critical ones; a preview counts its projected delta as
    # high-EPSS (`projectedHighEpss`)
    epss_high_percentile: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.9


class Runner(msgspec.Struct, frozen=True, kw_only=True):
    """[runner]: running segments against the scanner."""

    # STREAMPROC_RUNNER_WORKERS: segments processed at once by one runner process
    workers: Annotated[int, msgspec.Meta(ge=1, le=256)] = 2
    # STREAMPROC_RUNNER_INFLIGHT: scanner calls in flight per segment (capped by the schedule's
    # parallelism)
    inflight: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 8
    # STREAMPROC_RUNNER_ACK_WAIT_S: a segment whose runner stops heartbeating is redelivered after
    # this long
    ack_wait_s: float = 30.0
    # STREAMPROC_RUNNER_MAX_DELIVER: attempts of one segment
    max_deliver: Annotated[int, msgspec.Meta(ge=1, le=100)] = 5
    # STREAMPROC_RUNNER_RETRY_BACKOFF_S: delay before redelivering a failed segment, by attempt
    retry_backoff_s: tuple[float, ...] = (1.0, 5.0, 15.0, 60.0)
    # STREAMPROC_RUNNER_CALL_TIMEOUT_S: timeout of one scanner call
    call_timeout_s: float = 10.0
    # STREAMPROC_RUNNER_CALL_ATTEMPTS: attempts of one scanner call on transient errors
    call_attempts: Annotated[int, msgspec.Meta(ge=1, le=100)] = 8
    # STREAMPROC_RUNNER_CALL_BUDGET_S: time one image may spend retrying before the segment
    # attempt fails
    call_budget_s: float = 60.0


class Scanner(msgspec.Struct, frozen=True, kw_only=True):
    """[scanner]: the scanner the runner calls: its kind, the policy, the KEV catalog."""

    # STREAMPROC_SCANNER_URL: scanner base URL (unset: `streamproc up --demo` starts the reference
    # scanner on `scanner.port`)
    url: str = "http://127.0.0.1:8490"
    # STREAMPROC_SCANNER_PORT: loopback port of the reference scanner `streamproc up --demo`
    # starts when `scanner.url` is unset (the runners then call it there)
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 8490
    # STREAMPROC_SCANNER_KIND: what answers the runners: `stella` (a `/reports` service at
    # `scanner.url`), or a tool run on the stored SBOM
    kind: Literal["stella", "trivy", "grype", "osv-scanner"] = "stella"
    # STREAMPROC_SCANNER_KEV_CATALOG: a CISA KEV catalog file (JSON): findings whose id or alias
    # it lists are KEV (re-read when it changes)
    kev_catalog: str | None = None
    # STREAMPROC_SCANNER_FAIL_ON: the policy: a verdict FAILs with a finding of this severity or
    # above, or a KEV one
    fail_on: Literal["low", "medium", "high", "critical"] = "high"


class ScannerTrivy(msgspec.Struct, frozen=True, kw_only=True):
    """[scanner.trivy]: the `trivy` kind: Trivy on the stored SBOM (`trivy sbom FILE --format
    json`).
    """

    # STREAMPROC_SCANNER_TRIVY_PATH: the Trivy executable: a name looked up on PATH, or a path
    path: str = "trivy"
    # STREAMPROC_SCANNER_TRIVY_ARGS: extra arguments after the fixed ones, split into words as a
    # POSIX shell would (no shell runs)
    args: str = ""
    # STREAMPROC_SCANNER_TRIVY_TIMEOUT_S: a Trivy call running longer is killed (its whole process
    # group) and counts as `timeout`
    timeout_s: Annotated[float, msgspec.Meta(ge=0.001)] = 120.0
    # STREAMPROC_SCANNER_TRIVY_CONCURRENCY: Trivy processes one runner process runs at once
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=64)] = 2
    # STREAMPROC_SCANNER_TRIVY_SERVER: a `trivy server` URL: the runners pass `--server URL`, and
    # the server holds the DB
    server: str | None = None


class ScannerGrype(msgspec.Struct, frozen=True, kw_only=True):
    """[scanner.grype]: the `grype` kind: Grype on the stored SBOM (`grype sbom:FILE -o json`)."""

    # STREAMPROC_SCANNER_GRYPE_PATH: the Grype executable: a name looked up on PATH, or a path
    path: str = "grype"
    # STREAMPROC_SCANNER_GRYPE_ARGS: extra arguments after the fixed ones, split into words as a
    # POSIX shell would (no shell runs)
    args: str = ""
    # STREAMPROC_SCANNER_GRYPE_TIMEOUT_S: a Grype call running longer is killed (its whole process
    # group) and counts as `timeout`
    timeout_s: Annotated[float, msgspec.Meta(ge=0.001)] = 120.0
    # STREAMPROC_SCANNER_GRYPE_CONCURRENCY: Grype processes one runner process runs at once
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=64)] = 2


class ScannerOsvScanner(msgspec.Struct, frozen=True, kw_only=True):
    """[scanner.osv-scanner]: the `osv-scanner` kind: OSV-Scanner on the stored SBOM
    (`osv-scanner scan --sbom FILE --format json`).
    """

    # STREAMPROC_SCANNER_OSV_SCANNER_PATH: the OSV-Scanner executable: a name looked up on PATH,
    # or a path
    path: str = "osv-scanner"
    # STREAMPROC_SCANNER_OSV_SCANNER_ARGS: extra arguments after the fixed ones, split into words
    # as a POSIX shell would (no shell runs)
    args: str = ""
    # STREAMPROC_SCANNER_OSV_SCANNER_TIMEOUT_S: an OSV-Scanner call running longer is killed (its
    # whole process group) and counts as `timeout`
    timeout_s: Annotated[float, msgspec.Meta(ge=0.001)] = 120.0
    # STREAMPROC_SCANNER_OSV_SCANNER_CONCURRENCY: OSV-Scanner processes one runner process runs at
    # once
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=64)] = 2


class Audit(msgspec.Struct, frozen=True, kw_only=True):
    """[audit]: the audit chain: snapshots, signing key, trusted keys."""

    # STREAMPROC_AUDIT_BATCH_SIZE: chain entries per signed batch snapshot
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=100000)] = 1000
    # STREAMPROC_AUDIT_BATCH_INTERVAL_S: snapshot at least this often while entries wait
    batch_interval_s: float = 300.0
    # STREAMPROC_AUDIT_VERIFY_PERIOD_S: full chain verification period (0: at start only)
    verify_period_s: Annotated[float, msgspec.Meta(ge=0.0)] = 3600.0
    # STREAMPROC_AUDIT_VERIFY_ON_START: verify every chain when the auditor starts
    verify_on_start: bool = True
    # STREAMPROC_AUDIT_MAX_CLOCK_SKEW_MS: entries whose HLC is further ahead of the auditor's
    # clock are held
    max_clock_skew_ms: Annotated[int, msgspec.Meta(ge=0)] | None = None
    # STREAMPROC_AUDIT_SIGNING_KEY: Ed25519 seed of the snapshot signatures: 64 hex digits or
    # base64
    signing_key: str | None = None
    # STREAMPROC_AUDIT_KEY_ID: key id put in signatures
    key_id: str | None = None
    # STREAMPROC_AUDIT_TRUSTED_KEYS: other public keys to accept (`keyid=BASE64`), e.g. keys
    # rotated out
    trusted_keys: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        return _masked(self, ("signing_key",))


class Feeds(msgspec.Struct, frozen=True, kw_only=True):
    """[feeds]: the `feeds` role: an OSV directory watched, its changes recorded as Feedser
    exports.
    """

    # STREAMPROC_FEEDS_OSV_DIR: directory of OSV advisories (`*.json`) the `feeds` role watches;
    # new or changed advisories are recorded as a Feedser export for each of `feeds.tenants`
    osv_dir: str | None = None
    # STREAMPROC_FEEDS_TENANTS: tenants each export is recorded for (at least one when
    # `feeds.osv_dir` is set)
    tenants: tuple[str, ...] = ()
    # STREAMPROC_FEEDS_POLL_INTERVAL_S: seconds between two reads of the directory
    poll_interval_s: Annotated[float, msgspec.Meta(ge=1.0, le=86400.0)] = 60.0
    # STREAMPROC_FEEDS_KEV_FILE: CISA KEV catalog JSON: marks the KEV ids among the advisories
    kev_file: str | None = None
    # STREAMPROC_FEEDS_EPSS_FILE: FIRST's EPSS scores CSV (gzipped or not): each advisory's EPSS
    epss_file: str | None = None
    # STREAMPROC_FEEDS_DEBIAN_SOURCES: Debian binary→source package map (JSON `binaryToSource`):
    # expands Debian advisories to their binary packages
    debian_sources: str | None = None


class Impact(msgspec.Struct, frozen=True, kw_only=True):
    """[impact]: the impact index."""

    # STREAMPROC_IMPACT_CACHE_MB: memory bound of the impact index cache in MB (0 or less:
    # unbounded)
    cache_mb: int = 640
    # STREAMPROC_IMPACT_WARM_ON_START: load the impact index into memory at start (degraded
    # planning until warm)
    warm_on_start: bool = True


class Sboms(msgspec.Struct, frozen=True, kw_only=True):
    """[sboms]: the SBOM store (`<prefix>_sboms`): every indexed SBOM as it was sent."""

    # STREAMPROC_SBOMS_RETENTION_S: an SBOM no indexed image uses any more is deleted from the
    # SBOM store this many seconds after the last image using it was removed (or re-indexed with
    # another SBOM), and never sooner than this long after it was last stored; the active planner
    # deletes
    retention_s: Annotated[float, msgspec.Meta(ge=1.0)] = 86400.0


class Gateway(msgspec.Struct, frozen=True, kw_only=True):
    """[gateway]: the HTTP API: tokens, webhooks, body limits."""

    # STREAMPROC_GATEWAY_CONFIG: a JSON or TOML gateway file (the gateway keys without the
    # `gateway.` prefix); its keys override the `gateway` tables of this file
    config: str | None = None
    # STREAMPROC_GATEWAY_AUDIENCE: the `aud` tokens must carry
    audience: str = "scheduler"
    # STREAMPROC_GATEWAY_REQUIRED_MODES: accepted ways to present a token (`bearer`: unbound
    # tokens, dev only)
    required_modes: tuple[Literal["bearer", "dpop", "mtls"], ...] = ("dpop", "mtls")
    # STREAMPROC_GATEWAY_LEEWAY_S: clock leeway for token times
    leeway_s: Annotated[int, msgspec.Meta(ge=0, le=300)] = 30
    # STREAMPROC_GATEWAY_MAX_TOKEN_LIFETIME_S: longest accepted `exp - iat` of an access token
    # (tokens without `iat` are refused)
    max_token_lifetime_s: Annotated[int, msgspec.Meta(ge=60, le=2592000)] = 86400
    # STREAMPROC_GATEWAY_TOKEN_TYPES: accepted access-token `typ` values (RFC 9068 `at+jwt`; `JWT`
    # only for an issuer that cannot say `at+jwt`)
    token_types: tuple[str, ...] = ("at+jwt",)
    # STREAMPROC_GATEWAY_PUBLIC_BASE_URL: external origin (`https://host[:port]`) for DPoP `htu`
    # behind a proxy
    public_base_url: str | None = None
    # STREAMPROC_GATEWAY_WEBHOOK_WINDOW_S: webhook timestamps further off are refused
    webhook_window_s: Annotated[int, msgspec.Meta(ge=30, le=3600)] = 300
    # STREAMPROC_GATEWAY_REPLAY_CACHE_SIZE: live webhook delivery ids and DPoP proof ids the
    # replay bucket shared by every gateway replica holds (more: 503)
    replay_cache_size: Annotated[int, msgspec.Meta(ge=1000)] = 3000000
    # STREAMPROC_GATEWAY_REPLAY_PER_CLIENT: live ids one client (a webhook source, a DPoP key) may
    # hold through one gateway (more: 429)
    replay_per_client: Annotated[int, msgspec.Meta(ge=10)] = 100000
    # STREAMPROC_GATEWAY_MAX_BODY: compressed (on the wire) body cap in bytes
    max_body: Annotated[int, msgspec.Meta(ge=1024)] | None = None
    # STREAMPROC_GATEWAY_MAX_DECOMPRESSED_BODY: body cap after gzip/zstd decoding
    max_decompressed_body: Annotated[int, msgspec.Meta(ge=1024)] | None = None
    # STREAMPROC_GATEWAY_WAIT_TIMEOUT_S: longest `wait` a write request may ask for; also how long
    # a request naming a run or schedule not yet found waits for the read model to apply the log
    # before its 404
    wait_timeout_s: float = 10.0
    # STREAMPROC_GATEWAY_PREVIEW_TIMEOUT_S: deadline of an impact preview asked of the planners
    # over NATS (then 503)
    preview_timeout_s: Annotated[float, msgspec.Meta(ge=0.001, le=120.0)] = 5.0
    # STREAMPROC_GATEWAY_VERIFY_TIMEOUT_S: deadline of a chain verification asked of the auditors
    # over NATS (then 503)
    verify_timeout_s: Annotated[float, msgspec.Meta(ge=0.001, le=600.0)] = 120.0
    # STREAMPROC_GATEWAY_ACCESS_LOG: `stderr`, a file path (JSON lines), `logger` or `off`
    access_log: str = "stderr"
    # STREAMPROC_GATEWAY_ISSUER: one more token issuer (`iss`), with `gateway.issuer_key`
    issuer: str | None = None
    # STREAMPROC_GATEWAY_ISSUER_KEY: `kid=PUBLIC_KEY` (Ed25519, base64url) of `gateway.issuer`
    issuer_key: str | None = None
    # STREAMPROC_GATEWAY_ISSUER_TENANTS: the tenants `gateway.issuer` may speak for: tenant ids,
    # `prefix*` patterns or `*` (required with `gateway.issuer`)
    issuer_tenants: tuple[str, ...] | None = None


class GatewayDpop(msgspec.Struct, frozen=True, kw_only=True):
    """[gateway.dpop]: DPoP proof checking."""

    # STREAMPROC_GATEWAY_DPOP_REQUIRE_NONCE: DPoP proofs must carry a server nonce
    require_nonce: bool = True
    # STREAMPROC_GATEWAY_DPOP_NONCE_SECRET: HMAC key of the stateless nonces; share it between
    # gateway replicas
    nonce_secret: str | None = None
    # STREAMPROC_GATEWAY_DPOP_NONCE_TTL_S: nonce lifetime
    nonce_ttl_s: Annotated[int, msgspec.Meta(ge=10, le=3600)] = 300
    # STREAMPROC_GATEWAY_DPOP_IAT_WINDOW_S: proof `iat` further off is refused
    iat_window_s: Annotated[int, msgspec.Meta(ge=5, le=600)] = 60

    def __repr__(self) -> str:
        return _masked(self, ("nonce_secret",))


class Feedser(msgspec.Struct, frozen=True, kw_only=True):
    """[feedser]: the `streamproc feedser export` client."""

    # STREAMPROC_FEEDSER_SECRET: HMAC secret `streamproc feedser export` signs with
    secret: str | None = None
    # STREAMPROC_FEEDSER_TOKEN: access token `streamproc feedser export` presents (scope
    # `scheduler.webhook`, one tenant), DPoP-bound to the client's key (`client.dpop_key`)
    token: str | None = None
    # STREAMPROC_FEEDSER_ISSUER_KEY: issuer key file `streamproc feedser export` mints its tokens
    # from (development and tests)
    issuer_key: str | None = None
    # STREAMPROC_FEEDSER_TENANTS: tenants `streamproc feedser export` delivers each export to, one
    # delivery and token each (minted or client-credentials tokens)
    tenants: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        return _masked(self, ("secret", "token"))


class Vexer(msgspec.Struct, frozen=True, kw_only=True):
    """[vexer]: the `streamproc vexer export` client."""

    # STREAMPROC_VEXER_SECRET: HMAC secret `streamproc vexer export` signs with
    secret: str | None = None
    # STREAMPROC_VEXER_TOKEN: access token `streamproc vexer export` presents (scope
    # `scheduler.webhook`, one tenant), DPoP-bound to the client's key (`client.dpop_key`)
    token: str | None = None
    # STREAMPROC_VEXER_ISSUER_KEY: issuer key file `streamproc vexer export` mints its tokens from
    # (development and tests)
    issuer_key: str | None = None
    # STREAMPROC_VEXER_TENANTS: tenants `streamproc vexer export` delivers each export to, one
    # delivery and token each (minted or client-credentials tokens)
    tenants: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        return _masked(self, ("secret", "token"))


class Client(msgspec.Struct, frozen=True, kw_only=True):
    """[client]: commands that call the gateway: DPoP key and tokens."""

    # STREAMPROC_CLIENT_DPOP_KEY: the DPoP key (private Ed25519 JWK) every command that calls the
    # gateway signs its proofs with; created on first use with mode 0600
    dpop_key: str | None = None
    # STREAMPROC_TOKEN: static access token of `streamproc api`, bound to the client's DPoP key
    token: str | None = None
    # STREAMPROC_API_URL: the gateway `streamproc api` calls
    api_url: str | None = None
    # STREAMPROC_CLIENT_TOKEN_URL: the issuer's OAuth 2.0 token endpoint: commands without a
    # static token get DPoP-bound tokens there with client credentials, one per tenant
    token_url: str | None = None
    # STREAMPROC_CLIENT_ID: client id at `client.token_url` (HTTP Basic)
    client_id: str | None = None
    # STREAMPROC_CLIENT_SECRET: client secret at `client.token_url`
    client_secret: str | None = None
    # STREAMPROC_CLIENT_SCOPES: scopes asked of `client.token_url`
    scopes: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        return _masked(self, ("token", "client_secret"))


class Notify(msgspec.Struct, frozen=True, kw_only=True):
    """[notify]: the Notify HTTP feed (gateway) and the `streamproc notify tail` client."""

    # STREAMPROC_NOTIFY_TOKEN: static access token of `streamproc notify tail --http`, bound to
    # the client's DPoP key (instead of client credentials; one tenant)
    token: str | None = None
    # STREAMPROC_NOTIFY_CONSUMER_CLIENT_IDS: the HTTP feed's consumer: tokens whose `client_id`,
    # `azp` or `sub` is one of these may register and report positions (anyone else: 403)
    consumer_client_ids: tuple[str, ...] = ("streamproc-notify",)
    # STREAMPROC_FEED_LEASE_S: how long the feed keeps a consumer's registration, and holds what
    # it has not reported, without a new report
    feed_lease_s: Annotated[float, msgspec.Meta(ge=3.0)] = 86400.0
    # STREAMPROC_NOTIFY_MAX_AGE_S: the Notify stream's delivery window: every message is kept this
    # long (what an unregistered reader gets)
    max_age_s: Annotated[int, msgspec.Meta(ge=10)] = 86400
    # STREAMPROC_NOTIFY_MAX_RETENTION_S: the hold's limit: a message a live registration (or a
    # NATS durable consumer) has not reported is kept up to this long (the stream's `max_age`; at
    # least `notify.max_age_s`)
    max_retention_s: Annotated[int, msgspec.Meta(ge=10)] = 604800
    # STREAMPROC_NOTIFY_BASE_URL: `notify tail --http`: the feed's owner (the gateway), an
    # absolute http(s) URL without credentials, query or fragment
    base_url: str | None = None
    # STREAMPROC_NOTIFY_TENANTS: `notify tail --http`: the tenants to follow, one partition each
    # (ASCII letters, digits, `-`, `_`; lowered; distinct)
    tenants: tuple[str, ...] | None = None
    # STREAMPROC_NOTIFY_POLL_INTERVAL_S: `notify tail --http`: the pause between polls once every
    # partition is caught up
    poll_interval_s: Annotated[float, msgspec.Meta(ge=0.001)] = 15.0
    # STREAMPROC_NOTIFY_BATCH_SIZE: `notify tail --http`: events per partition and request
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=500)] = 50
    # STREAMPROC_NOTIFY_HTTP_TIMEOUT_S: `notify tail --http`: timeout of each request to the feed
    http_timeout_s: Annotated[float, msgspec.Meta(ge=0.001)] = 30.0
    # STREAMPROC_NOTIFY_LEASE_TTL_S: `notify tail --http`: a partition's processing lease, renewed
    # while its events are handled (another consumer on the same state waits it out)
    lease_ttl_s: Annotated[float, msgspec.Meta(ge=3.0)] = 120.0

    def __repr__(self) -> str:
        return _masked(self, ("token",))


class Sections(msgspec.Struct, frozen=True, kw_only=True):
    """Every section of the registry, typed."""

    node: Node = msgspec.field(default_factory=Node)
    nats: Nats = msgspec.field(default_factory=Nats)
    http: Http = msgspec.field(default_factory=Http)
    hlc: Hlc = msgspec.field(default_factory=Hlc)
    projector: Projector = msgspec.field(default_factory=Projector)
    streams: Streams = msgspec.field(default_factory=Streams)
    lease: Lease = msgspec.field(default_factory=Lease)
    status: Status = msgspec.field(default_factory=Status)
    readmodel: Readmodel = msgspec.field(default_factory=Readmodel)
    otel: Otel = msgspec.field(default_factory=Otel)
    planner: Planner = msgspec.field(default_factory=Planner)
    runner: Runner = msgspec.field(default_factory=Runner)
    scanner: Scanner = msgspec.field(default_factory=Scanner)
    scanner_trivy: ScannerTrivy = msgspec.field(default_factory=ScannerTrivy)
    scanner_grype: ScannerGrype = msgspec.field(default_factory=ScannerGrype)
    scanner_osv_scanner: ScannerOsvScanner = msgspec.field(default_factory=ScannerOsvScanner)
    audit: Audit = msgspec.field(default_factory=Audit)
    feeds: Feeds = msgspec.field(default_factory=Feeds)
    impact: Impact = msgspec.field(default_factory=Impact)
    sboms: Sboms = msgspec.field(default_factory=Sboms)
    gateway: Gateway = msgspec.field(default_factory=Gateway)
    gateway_dpop: GatewayDpop = msgspec.field(default_factory=GatewayDpop)
    feedser: Feedser = msgspec.field(default_factory=Feedser)
    vexer: Vexer = msgspec.field(default_factory=Vexer)
    client: Client = msgspec.field(default_factory=Client)
    notify: Notify = msgspec.field(default_factory=Notify)
