"""The rules that span keys of a validated router.yaml (router/config/load.py runs them last):
credentials that are no placeholders, the secure profile's bind, CORS, the cluster's URLs and
the backend arguments the router manages itself. Each broken rule is a `SettingsError` naming
the key, built by the loader's reporter (which knows the file, the lines and the environment).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from router.config.addresses import is_ip, split_bind
from router.config.schema import PROGRAM_SECTIONS, ProgramSection, Settings, SettingsError


def dotted(loc: tuple[Any, ...]) -> str:
    """A key's name as the file spells it: `cluster.nodes[0].url`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class Report(Protocol):
    origins: Mapping[str, tuple[str, str]]  # a dotted key -> (file, variable) it came from

    def error(self, loc: tuple[str | int, ...], message: str) -> SettingsError:
        """The error for the key at `loc`, where its value came from."""
        ...


def check_policy(settings: Settings, report: Report) -> None:
    """The rules that span keys, on validated and resolved settings: the first broken one
    raises `report.error` for the key it concerns."""
    _check_credentials(settings, report)
    _check_secure_bind(settings, report)
    _check_cors_wildcard(settings, report)
    _check_cluster(settings, report)
    _check_extra_args(settings, report)
    config_dir = settings.models.config_dir
    if not config_dir.is_dir():
        problem = "is not a folder" if config_dir.exists() else "does not exist"
        message = f"{config_dir} {problem}; create it and put the .kcpps files there"
        raise report.error(("models", "config_dir"), message)


_PLACEHOLDERS = frozenset(
    {"changeme", "example", "password", "secret", "token", "key", "apikey", "none", "null"}
    | {"todo", "tbd", "default", "placeholder", "dummy", "foo", "bar", "foobar", "abc", "123"}
)
_PLACEHOLDER_PARTS = (
    *("changeme", "replaceme", "yourkey", "yourtoken", "yoursecret", "yourapikey"),
    *("yourpassword", "placeholder", "example", "password", "secret", "insertkey"),
)


def placeholder_reason(value: str) -> str | None:
    """Why `value` cannot be a real credential, or None when it might be one."""
    if not value.strip():
        return "is empty"
    if "${" in value or (value.startswith("<") and value.endswith(">")):
        return "is an unfilled template"
    if any(ch.isspace() or not ch.isprintable() or not ch.isascii() for ch in value):
        return "may only contain visible ASCII characters, without spaces"
    folded = re.sub(r"[^a-z0-9]", "", value.lower())
    if folded in _PLACEHOLDERS or len(set(folded)) <= 1 or folded.startswith("xxx"):
        return "is a placeholder"
    if any(part in folded for part in _PLACEHOLDER_PARTS):
        return "looks like a placeholder"
    return None


def _check_credentials(settings: Settings, report: Report) -> None:
    """No placeholders; every key distinct within and across the inference/admin/cluster roles."""
    entries: list[tuple[tuple[str | int, ...], str]] = [
        *((("auth", "inference_keys", i), k) for i, k in enumerate(settings.auth.inference_keys)),
        *((("auth", "admin_keys", i), k) for i, k in enumerate(settings.auth.admin_keys)),
    ]
    if settings.cluster.token is not None:
        entries.append((("cluster", "token"), settings.cluster.token))
    seen: dict[str, tuple[str | int, ...]] = {}
    for loc, value in entries:
        reason = placeholder_reason(value)
        if reason:
            hint = "generate one, e.g. `openssl rand -hex 32`"
            raise report.error(loc, f"credential {reason}; {hint}")
        first = seen.setdefault(value, loc)
        if first is not loc:
            other = report.origins.get(dotted(first), ("", dotted(first)))[1]
            same_role = first[:2] == loc[:2]
            what = "duplicate of" if same_role else "reused: the same credential is"
            raise report.error(loc, f"{what} {other}; each role needs its own key")


def _is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_secure_bind(settings: Settings, report: Report) -> None:
    host = settings.server.host
    if settings.security.profile != "secure" or _is_loopback_host(host):
        return
    if not settings.auth.inference_keys or not settings.auth.admin_keys:
        message = (
            f"binding {host} (not loopback) under security.profile secure needs at least one "
            "auth.inference_keys and one auth.admin_keys entry (or TENSOR_ROUTER_INFERENCE_KEY "
            "and TENSOR_ROUTER_ADMIN_KEY)"
        )
        raise report.error(("server", "bind"), message)


def _check_cors_wildcard(settings: Settings, report: Report) -> None:
    """`*` lets any web page call the model APIs: only where a key is needed to do so."""
    origins = settings.server.cors_origins
    if "*" not in origins:
        return
    loc = ("server", "cors_origins", origins.index("*"))
    if settings.security.profile != "secure" or not settings.auth.inference_keys:
        message = (
            "'*' (any web page) is allowed only under security.profile secure with at least "
            "one auth.inference_keys entry; list the exact origins instead"
        )
        raise report.error(loc, message)


def _url_identity(url: str) -> tuple[str, int, str]:
    """(host, port, path) of a cluster base URL; ValueError with the reason when unusable."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry credentials (the cluster token is sent separately)")
    if parts.query or parts.fragment:
        raise ValueError("must not have a query or fragment")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ValueError("has a bad port") from None
    host = parts.hostname
    host = str(ipaddress.ip_address(host)) if is_ip(host) else host.rstrip(".")
    return host, port, parts.path.rstrip("/")


def _points_at_bind(host: str, port: int, bind_host: str, bind_port: int) -> bool:
    """True when a URL reaches this router's own listener (as far as can be told without DNS)."""
    if port != bind_port:
        return False
    if host == bind_host.lower() or (_is_loopback_host(host) and _is_loopback_host(bind_host)):
        return True
    return bind_host in ("0.0.0.0", "::") and _is_loopback_host(host)


def _check_cluster(settings: Settings, report: Report) -> None:
    cluster = settings.cluster
    if cluster.role == "slave":
        for name in ("master_url", "public_url"):
            if not getattr(cluster, name):
                raise report.error(("cluster", name), "required when cluster.role is slave")
    if cluster.role != "standalone" and not cluster.token:
        message = f"required when cluster.role is {cluster.role} (or TENSOR_ROUTER_CLUSTER_TOKEN)"
        raise report.error(("cluster", "token"), message)
    urls: list[tuple[tuple[str | int, ...], str | None]] = [
        (("cluster", "public_url"), cluster.public_url),
        (("cluster", "master_url"), cluster.master_url),
        *((("cluster", "slave_urls", i), url) for i, url in enumerate(cluster.slave_urls)),
    ]
    bind_host, bind_port = split_bind(settings.server.bind)
    seen: dict[tuple[str, int, str], tuple[str | int, ...]] = {}
    for loc, url in urls:
        if url is None:
            continue
        try:
            identity = _url_identity(url)
        except ValueError as err:
            raise report.error(loc, str(err)) from None
        if identity in seen:
            raise report.error(loc, f"overlaps {dotted(seen[identity])} (same host, port and path)")
        seen[identity] = loc
        # public_url is this node's own advertised address, so only peers are checked for self.
        if loc[1] != "public_url" and _points_at_bind(*identity[:2], bind_host, bind_port):
            raise report.error(
                loc, f"points at this router's own server.bind {settings.server.bind}"
            )


# Flags the router sets itself; letting extra_args repeat them would move or expose a backend.
_MANAGED_FLAGS = ("--host", "--port", "--api-key", "--api-key-file", "--uds")
_MANAGED_BY_SECTION = {
    "kobold": ("--config", "--onready", "--allow-config-onready", "--password"),
    "sdcpp": ("--listen-ip", "--listen-port", "-l"),
}


def _check_extra_args(settings: Settings, report: Report) -> None:
    for name in PROGRAM_SECTIONS.values():
        section: ProgramSection = getattr(settings, name)
        refused = _MANAGED_FLAGS + _MANAGED_BY_SECTION.get(name, ())
        for index, arg in enumerate(section.extra_args):
            flag = arg.split("=", 1)[0]
            if flag in refused:
                message = f"{flag} is set by the router and cannot be overridden"
                raise report.error((name, "extra_args", index), message)
