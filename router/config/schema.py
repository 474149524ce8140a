"""The `router.yaml` schema: typed, frozen `Settings` sections (DESIGN.md section 3,
docs/configuration.md).

Pure: reading the YAML, the credential files and the rules that span keys (credentials, cluster
URLs, the secure-profile bind rule) live in `router.config.load`. Each model here checks its
own values only, so tests elsewhere can build a `Settings` by hand without inventing
production-grade keys.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from router.config.sizes import Size, SizeOrAuto
from router.domain import BackendMode, Family

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_BARE_NUMBER = re.compile(_NUMBER, re.ASCII)
_DURATION_PART = re.compile(rf"({_NUMBER})(ms|s|m|h|d)\s*", re.ASCII)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_HELP = "use a number of seconds or a string like 250ms, 30s, 10m, 2h, 1d, 1h30m"
_NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$")


class SettingsError(Exception):
    """A settings problem, always naming the key and the file at fault (and the line if known)."""

    def __init__(self, file: str, key: str, message: str, *, line: int | None = None) -> None:
        self.file, self.key, self.message, self.line = file, key, message, line
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key}: {message}")


def parse_duration(value: Any) -> float:
    """`30s`, `10m`, `1.5h`, `250ms`, `1h30m`, a bare number of seconds -> seconds as float.

    Raises ValueError (and nothing else) for anything that is not a finite, non-negative duration.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"bad duration {value!r}: {_DURATION_HELP}")
    if isinstance(value, str):
        seconds = _parse_duration_text(value.strip())
    else:
        try:
            seconds = float(value)
        except OverflowError:
            raise ValueError(f"duration {value!r} is too large") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"bad duration {value!r}: must be finite and not negative")
    return seconds


def _parse_duration_text(text: str) -> float:
    if _BARE_NUMBER.fullmatch(text):
        return float(text)
    total, pos = 0.0, 0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if not text or pos != len(text):
        raise ValueError(f"bad duration {text!r}: {_DURATION_HELP}")
    return total


Duration = Annotated[float, BeforeValidator(parse_duration)]
PositiveDuration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]


def _canonical_cidr(value: str) -> str:
    # Host bits are forgiven (192.168.1.5/24 means the /24); the stored form is canonical.
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP network like 192.168.1.0/24") from None


def _host_name(value: str) -> str:
    if not _HOSTNAME.match(value) and not is_ip(value.strip("[]")):
        raise ValueError(f"{value!r} is not a host name or IP address (no scheme, no port)")
    return value.lower()


Cidr = Annotated[str, AfterValidator(_canonical_cidr)]
HostName = Annotated[str, AfterValidator(_host_name)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SecuritySection(_Section):
    profile: Literal["secure", "trusted_lan"] = "secure"


DEFAULT_CIDRS = (
    "127.0.0.0/8",
    "::1/128",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
)


class ServerSection(_Section):
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
        return _origin_only(value) if value is not None and value.strip() else None

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
        # The default reserve shrinks to fit a small cap (listener.py); a chosen one must fit.
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


class AuthSection(_Section):
    inference_keys: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()
    # Alias of `cluster.token` (the canonical place); Settings keeps the two equal.
    cluster_token: str | None = None


class ModelsSection(_Section):
    config_dir: Path = Path("./kcpps")
    startup_model: str | None = None
    file_roots: tuple[Path, ...] = ()

    @field_validator("startup_model")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None


class BackendSection(_Section):
    mode: BackendMode = BackendMode.LLAMA_SDCPP


class ProgramSection(_Section):
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


class RuntimeSection(_Section):
    load_timeout: PositiveDuration = 600.0
    no_progress_timeout: PositiveDuration = 120.0
    idle_unload: Duration = 0.0
    stop_grace: Duration = 10.0
    drain_timeout: Duration = 900.0
    max_queue: int = Field(default=64, ge=0)
    # R19: requests one runtime serves at once; more wait in the lane's queue. 0: no cap.
    max_in_flight: int = Field(default=0, ge=0)
    queue_timeout: PositiveDuration = 600.0
    # R17: queued requests for the loaded model go first, but never wait longer than this.
    max_batch_wait: Duration = 30.0
    # Issue 26: `grouped` serves the loaded model's queued requests before switching (bounded
    # by max_batch_wait and max_bypass); `fifo` serves strictly in arrival order.
    queue_order: Literal["grouped", "fifo"] = "grouped"
    max_bypass: int = Field(default=8, ge=0)
    # A streamed OpenAI chat request that has waited this long for its runtime starts its
    # answer with SSE comment lines (position, ETA) while it waits; 0: never (docs/swaps.md).
    announce_wait_after: Duration = 2.0
    stream_idle_timeout: PositiveDuration = 300.0
    # R24: how long one request waits for its whole answer (a non-streamed generation arrives
    # only when done, so no idle deadline can tell a slow backend from a hung one).
    response_timeout: PositiveDuration = 1800.0
    # KV persistence (docs/swaps.md): disk cap for saved llama-server slots, and how long a
    # save (before a stop) or a restore (before the first request) may take.
    kv_cache_dir_budget: Size = 4 << 30
    kv_save_timeout: PositiveDuration = 10.0
    kv_restore_timeout: PositiveDuration = 10.0
    # While a lane drains for a swap, read the incoming model's files into the page cache,
    # capped by the host memory budget (docs/swaps.md, "Overlapping the swap"); false: never.
    readahead: bool = True
    # Issue 25 (docs/residency.md): `memory` prices loads against the memory ledger (a load
    # that does not fit stops the cheapest idle runtimes; one larger than a whole budget is
    # refused); `lane` keeps one runtime per lane and never acts on memory.
    residency: Literal["memory", "lane"] = "memory"


class MemorySection(_Section):
    """The memory ledger's budgets per device (docs/residency.md); the runtime manager acts on
    them when `runtime.residency` is `memory`. `host_budget` also caps the swap's read-ahead."""

    # `auto`: total RAM minus `reserve`; or a size such as 600MiB.
    host_budget: SizeOrAuto = "auto"
    # `auto`: each GPU's total minus `reserve`; or a size applied to each GPU.
    gpu_budget: SizeOrAuto = "auto"
    reserve: Size = 1 << 30


class AnalyticsSection(_Section):
    enabled: bool = True
    database_path: Path | None = None
    flush_interval: PositiveDuration = 5.0
    # Events are committed by a small helper process (store/event_writer.py) so SQLite work
    # stays off the event loop; false writes them from a thread of the router itself.
    writer_process: bool = True
    raw_retention: PositiveDuration = 30 * 86400.0
    load_capture_enabled: bool = False
    load_capture_max_output_mb: float = Field(default=64, gt=0)


class LimitsSection(_Section):
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


class MediaSection(_Section):
    ffmpeg: str = Field(default="ffmpeg", min_length=1)
    scratch_dir: Path | None = None


class LendingSettings(_Section):
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


class UiSection(_Section):
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


def _hub_endpoint(value: str) -> str:
    # https anywhere; plain http only to a loopback mirror (a test hub, a local cache).
    parts = urlsplit(value.strip())
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError(f"{value!r} must be an http(s) URL like https://huggingface.co")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"{value!r}: no credentials, query or fragment in the endpoint")
    loopback = host == "localhost" or (is_ip(host) and ipaddress.ip_address(host).is_loopback)
    if parts.scheme == "http" and not loopback:
        raise ValueError(f"{value!r}: plain http is allowed only on a loopback address")
    return value.strip().rstrip("/")


class DownloadsSection(_Section):
    """Hugging Face downloads (docs/downloads.md). `token` is a secret: never rendered."""

    enabled: bool = True
    endpoint: Annotated[str, AfterValidator(_hub_endpoint)] = "https://huggingface.co"
    token: str | None = Field(default=None, repr=False)
    # None: `downloads` next to the store's database (the data folder).
    dir: Path | None = None
    free_space_reserve_gb: float = Field(default=2.0, ge=0)
    max_concurrent: int = Field(default=1, ge=1, le=8)


class SetupSection(_Section):
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


class Settings(_Section):
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
    ui: UiSection = UiSection()
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


def _origin_only(value: str) -> str:
    """An http(s) origin and nothing more (no user info, path, query or fragment)."""
    parts = urlsplit(value.strip())
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ValueError(f"{value!r} has a bad port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} must be an http:// or https:// origin")
    if parts.username or parts.password or parts.path not in ("", "/"):
        raise ValueError(f"{value!r} must be an origin only: no user info or path")
    if parts.query or parts.fragment:
        raise ValueError(f"{value!r} must be an origin only: no query or fragment")
    return f"{parts.scheme}://{parts.netloc}"


def cors_origin(value: str) -> str:
    """A browser origin as browsers serialize it in `Origin`: lower case, default port left
    out, no trailing slash (so an exact comparison with the header is right)."""
    origin = _origin_only(value)
    parts = urlsplit(origin)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    default = {"http": 80, "https": 443}[parts.scheme]
    port = f":{parts.port}" if parts.port not in (None, default) else ""
    return f"{parts.scheme}://{host.lower()}{port}"


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def split_bind(bind: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:8080`) -> (host without brackets, port); ValueError if bad."""
    host, sep, port = bind.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bind {bind!r} must be HOST:PORT with a port from 0 to 65535")
    if host.startswith("[") and host.endswith("]"):
        if ":" not in host or not is_ip(host[1:-1]):
            raise ValueError(f"bind {bind!r}: {host} is not an IPv6 address")
        return host[1:-1], int(port)
    if ":" in host:
        raise ValueError(f"bind {bind!r}: write an IPv6 address in brackets, like [::1]:8080")
    if not _HOSTNAME.match(host):
        raise ValueError(f"bind {bind!r}: {host!r} is not a host name or IPv4 address")
    return host, int(port)


__all__ = [
    "DEFAULT_CIDRS",
    "PROGRAM_SECTIONS",
    "DownloadsSection",
    "Duration",
    "MemorySection",
    "PositiveDuration",
    "Settings",
    "SettingsError",
    "parse_duration",
    "split_bind",
]
