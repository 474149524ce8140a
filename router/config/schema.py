"""The `router.yaml` schema: typed, frozen `Settings` sections (DESIGN.md section 3,
docs/configuration.md).

Pure: reading the YAML and the credential files live in `router.config.load`, the rules that
span keys (credentials, cluster URLs, the secure-profile bind rule) in `router.config.policy`.
Each model here checks its own values only, so tests elsewhere can build a `Settings` by hand
without inventing production-grade keys. The `runtime` and `memory` sections are in runtime_sections.py; the field
types in durations.py, sizes.py and addresses.py.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from router.config.addresses import (
    Cidr,
    HostName,
    cors_origin,
    hub_endpoint,
    origin_only,
    split_bind,
)
from router.config.durations import Duration, PositiveDuration
from router.config.pooled import PooledSection
from router.config.runtime_sections import MemorySection, RuntimeSection
from router.config.section import Section
from router.domain import BackendMode, Family

_NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class SettingsError(Exception):
    """A settings problem, always naming the key and the file at fault (and the line if known)."""

    def __init__(self, file: str, key: str, message: str, *, line: int | None = None) -> None:
        self.file, self.key, self.message, self.line = file, key, message, line
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key}: {message}")


class SecuritySection(Section):
    profile: Literal["secure", "trusted_lan"] = "secure"


DEFAULT_CIDRS = (
    "127.0.0.0/8",
    "::1/128",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
)


class ServerSection(Section):
    bind: str = "127.0.0.1:8080"
    allowed_cidrs: tuple[Cidr, ...] = DEFAULT_CIDRS
    allowed_hosts: tuple[HostName, ...] = ()
    # An event loop holds a thousand idle sockets cheaply; the fd limit is raised to fit
    # (server.py). One peer gets a share, and the last slots are kept for the operator (S1, S3).
    max_connections: int = Field(default=1024, ge=1)
    max_connections_per_peer: int = Field(default=64, ge=1)
    reserved_connections: int = Field(default=8, ge=0)
    reserved_cidrs: tuple[Cidr, ...] = ("127.0.0.1/32", "::1/128")
    header_timeout: PositiveDuration = 30.0
    # The backend WebUIs' own listener, another origin than the API (docs/webuis.md):
    # `auto` is the API's host and port + 1 (another free port if that one is taken), `off`
    # disables it, or an explicit HOST:PORT.
    backend_ui_bind: str = "auto"
    backend_ui_public_url: str | None = None
    # Browser origins whose pages may call the inference routes (CORS, router/edge/cors.py).
    # Exact origins; `*` only under the secure profile with inference keys (load.py).
    cors_origins: tuple[str, ...] = ()

    @field_validator("bind")
    @classmethod
    def _check_bind(cls, value: str) -> str:
        split_bind(value)
        return value

    @field_validator("backend_ui_bind")
    @classmethod
    def _check_ui_bind(cls, value: str) -> str:
        if value.strip() not in ("auto", "off"):
            split_bind(value)
        return value.strip()

    @field_validator("backend_ui_public_url")
    @classmethod
    def _check_ui_url(cls, value: str | None) -> str | None:
        return origin_only(value) if value is not None and value.strip() else None

    @field_validator("cors_origins")
    @classmethod
    def _check_cors(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys("*" if v.strip() == "*" else cors_origin(v) for v in value))

    def backend_ui_address(self) -> tuple[str, int] | None:
        """Where the backend-UI listener binds; None when it is off."""
        if self.backend_ui_bind == "off":
            return None
        if self.backend_ui_bind == "auto":
            return self.host, (self.port + 1 if 0 < self.port < 65535 else 0)
        return split_bind(self.backend_ui_bind)

    @property
    def host(self) -> str:
        return split_bind(self.bind)[0]

    @property
    def port(self) -> int:
        return split_bind(self.bind)[1]

    @model_validator(mode="after")
    def _check_reserve(self) -> ServerSection:
        # The default reserve shrinks to fit a small cap (edge/connection_caps.py); a chosen one must fit.
        chosen = "reserved_connections" in self.model_fields_set
        if chosen and self.reserved_connections >= self.max_connections:
            raise ValueError(
                "server.reserved_connections must be smaller than server.max_connections"
            )
        # `auto` never collides (port + 1); only an explicit address can equal the API's.
        explicit = self.backend_ui_bind not in ("auto", "off")
        if explicit and self.port and split_bind(self.backend_ui_bind) == (self.host, self.port):
            raise ValueError(
                "server.backend_ui_bind must differ from server.bind: backend UIs need "
                "their own origin"
            )
        return self

    def networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(ipaddress.ip_network(c, strict=False) for c in self.allowed_cidrs)

    def reserved_networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(ipaddress.ip_network(c, strict=False) for c in self.reserved_cidrs)


class AuthSection(Section):
    inference_keys: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()
    # Alias of `cluster.token` (the canonical place); Settings keeps the two equal.
    cluster_token: str | None = None


class ModelsSection(Section):
    config_dir: Path = Path("./kcpps")
    startup_model: str | None = None
    file_roots: tuple[Path, ...] = ()

    @field_validator("startup_model")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None


class BackendSection(Section):
    mode: BackendMode = BackendMode.LLAMA_SDCPP


class ProgramSection(Section):
    """One native program. `command` (argv list) wins over `binary_path` when both are set."""

    binary_path: Path | None = None
    command: tuple[str, ...] | None = Field(default=None, min_length=1)
    data_dir: Path | None = None
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = Field(default_factory=dict)
    # R23b: for a program that crashes when a generation is cancelled (llama-swap#980), a
    # client that leaves does not cancel: the answer is read to its end within these bounds.
    drain_on_abort: bool = False
    abort_drain_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    abort_drain_timeout: PositiveDuration = 300.0


class VllmSection(ProgramSection):
    allow_trust_remote_code: bool = False


class AnalyticsSection(Section):
    enabled: bool = True
    database_path: Path | None = None
    flush_interval: PositiveDuration = 5.0
    # Events are committed by a small helper process (store/event_writer.py) so SQLite work
    # stays off the event loop; false writes them from a thread of the router itself.
    writer_process: bool = True
    raw_retention: PositiveDuration = 30 * 86400.0
    load_capture_enabled: bool = False
    load_capture_max_output_mb: float = Field(default=64, gt=0)


class LimitsSection(Section):
    max_control_body_mb: float = Field(default=8, gt=0)
    selector_scan_mb: float = Field(default=8, gt=0)
    max_stream_request_gb: float = Field(default=4, gt=0)
    upload_mb: float = Field(default=32, gt=0)
    workflow_media_mb: float = Field(default=64, gt=0)
    max_header_kb: int = Field(default=64, ge=1)

    @model_validator(mode="after")
    def _scan_fits_request(self) -> LimitsSection:
        if self.selector_scan_mb > self.max_stream_request_gb * 1024:
            raise ValueError("selector_scan_mb cannot exceed max_stream_request_gb")
        return self


class MediaSection(Section):
    ffmpeg: str = Field(default="ffmpeg", min_length=1)
    scratch_dir: Path | None = None


class LendingSettings(Section):
    """The lending keys (docs/lending.md): `cluster.*` in the config file, and the batch the
    WebUI's Lending page saves over them (validated whole: one bad value changes nothing)."""

    # Fallback tick for refitting costs and planning leases (events plan sooner).
    scheduling_refresh_interval: PositiveDuration = 60.0
    # Analytics younger than this feed the cost fits; must stay within analytics.raw_retention.
    scheduling_sample_window: PositiveDuration = 86400.0
    # Samples a node needs before its own fit is trusted (below: priced conservatively).
    scheduling_min_samples: int = Field(default=20, ge=2, le=100_000)
    # A linked model admits this many requests to its backend at once; the rest wait here.
    scheduling_backend_depth: int = Field(default=2, ge=1, le=64)
    scheduling_grant_ttl: PositiveDuration = 30.0
    # Tokens reserved for the answer when a queued request states no max_tokens.
    scheduling_context_reserve: int = Field(default=256, ge=0, le=2**20)
    offload_restore_delay: PositiveDuration = 1.5
    offload_probe_idle: PositiveDuration = 5.0
    offload_faster_helper_slots: int = Field(default=2, ge=1, le=64)
    offload_slower_helper_slots: int = Field(default=1, ge=1, le=64)
    offload_probe_helper_slots: int = Field(default=1, ge=1, le=64)
    offload_hold_for_faster_helper: bool = True
    offload_decisions_retention: PositiveDuration = 30 * 86400.0

    def lending(self) -> LendingSettings:
        """Just the lending keys, as their own settings object."""
        return LendingSettings.model_validate(
            {name: getattr(self, name) for name in LendingSettings.model_fields}
        )


class ClusterSection(LendingSettings):
    role: Literal["standalone", "master", "slave"] = "standalone"
    node_id: str = "local"
    public_url: str | None = None
    master_url: str | None = None
    slave_urls: tuple[str, ...] = ()
    token: str | None = None
    sync_interval: PositiveDuration = 30.0
    health_interval: PositiveDuration = 10.0
    # One deadline per buffered node call (request and answer); streams have their own.
    control_timeout: PositiveDuration = 30.0
    sync_concurrency: int = Field(default=4, ge=1, le=128)

    @field_validator("node_id")
    @classmethod
    def _check_node_id(cls, value: str) -> str:
        if not _NODE_ID.match(value):
            raise ValueError(
                "use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        return value


class UiSection(Section):
    """The admin WebUI's login sessions (router/edge/ui_sessions.py)."""

    session_ttl: PositiveDuration = 86400.0
    max_sessions: int = Field(default=64, ge=1)
    # Add `Secure` to the session cookie: set it when browsers reach the router over HTTPS
    # (a TLS reverse proxy, deploy/nginx.conf); a plain-HTTP browser would then never send it.
    cookie_secure: bool = False
    login_failures_per_minute: int = Field(default=10, ge=0)
    # /router/v1/events: a comment line at least this often; a subscriber's backlog bound.
    events_heartbeat: PositiveDuration = 15.0
    events_queue: int = Field(default=256, ge=8)


def _trace_url(value: str | None) -> str | None:
    if value is None:
        return None
    if "{trace_id}" not in value or not re.match(r"^https?://", value):
        raise ValueError(
            "must be an http(s) URL with a {trace_id} placeholder, e.g. "
            "http://jaeger.lan:16686/trace/{trace_id}"
        )
    return value


class ObservabilitySection(Section):
    """Traces (docs/observability.md): they are turned on by the standard OTEL_* environment;
    `trace_url` makes the WebUI link a stored trace id to a trace viewer (Jaeger, Tempo)."""

    trace_url: Annotated[str | None, AfterValidator(_trace_url)] = None


class DownloadsSection(Section):
    """Hugging Face downloads (docs/downloads.md). `token` is a secret: never rendered."""

    enabled: bool = True
    endpoint: Annotated[str, AfterValidator(hub_endpoint)] = "https://huggingface.co"
    token: str | None = Field(default=None, repr=False)
    # None: `downloads` next to the store's database (the data folder).
    dir: Path | None = None
    free_space_reserve_gb: float = Field(default=2.0, ge=0)
    max_concurrent: int = Field(default=1, ge=1, le=8)


class SetupSection(Section):
    """Backend init jobs (docs/backends-setup.md)."""

    # A JSON recipe set replacing the built-in recipes (backends/recipes.py, same fields).
    recipes_file: Path | None = None
    build_jobs: int = Field(default=2, ge=1, le=256)
    step_timeout: PositiveDuration = 7200.0  # one step; a vLLM install or llama.cpp build
    probe_timeout: PositiveDuration = 120.0
    cancel_grace: Duration = 10.0  # TERM -> KILL for a cancelled step's process group
    max_output_mb: float = Field(default=4.0, gt=0, le=256)
    keep_jobs: int = Field(default=20, ge=1, le=1000)  # finished jobs kept on disk


# The settings section that configures each family's native program (the one map: the loader,
# the adapters and the test harness all read it).
PROGRAM_SECTIONS: Mapping[Family, str] = {
    Family.KOBOLD: "kobold",
    Family.LLAMACPP: "llama",
    Family.SDCPP: "sdcpp",
    Family.WHISPERCPP: "whispercpp",
    Family.VLLM: "vllm",
}


class Settings(Section):
    security: SecuritySection = SecuritySection()
    server: ServerSection = ServerSection()
    auth: AuthSection = AuthSection()
    models: ModelsSection = ModelsSection()
    backend: BackendSection = BackendSection()
    kobold: ProgramSection = ProgramSection()
    llama: ProgramSection = ProgramSection()
    sdcpp: ProgramSection = ProgramSection()
    whispercpp: ProgramSection = ProgramSection()
    vllm: VllmSection = VllmSection()
    runtime: RuntimeSection = RuntimeSection()
    memory: MemorySection = MemorySection()
    analytics: AnalyticsSection = AnalyticsSection()
    limits: LimitsSection = LimitsSection()
    media: MediaSection = MediaSection()
    cluster: ClusterSection = ClusterSection()
    pooled: PooledSection = PooledSection()  # memory lent over RPC (docs/cluster.md)
    ui: UiSection = UiSection()
    observability: ObservabilitySection = ObservabilitySection()
    downloads: DownloadsSection = DownloadsSection()
    setup: SetupSection = SetupSection()
    # Where the YAML came from (not a YAML key): relative paths resolved against its folder.
    source: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _one_cluster_token(self) -> Settings:
        alias, canonical = self.auth.cluster_token, self.cluster.token
        if alias is not None and canonical is not None and alias != canonical:
            raise ValueError("auth.cluster_token and cluster.token differ; set only cluster.token")
        token = canonical if canonical is not None else alias
        # Frozen models: bypass __setattr__ once, at construction, to keep the alias in step.
        object.__setattr__(self, "auth", self.auth.model_copy(update={"cluster_token": token}))
        object.__setattr__(self, "cluster", self.cluster.model_copy(update={"token": token}))
        return self

    @model_validator(mode="after")
    def _sample_window_within_retention(self) -> Settings:
        # Cost fits read analytics this old; older raw events are already deleted.
        window, retention = self.cluster.scheduling_sample_window, self.analytics.raw_retention
        if window > retention:
            raise ValueError(
                f"cluster.scheduling_sample_window ({window:g}s) must not exceed "
                f"analytics.raw_retention ({retention:g}s): raise the retention or shorten "
                "the window"
            )
        return self


__all__ = [
    "DEFAULT_CIDRS",
    "PROGRAM_SECTIONS",
    "DownloadsSection",
    "Settings",
    "SettingsError",
]
