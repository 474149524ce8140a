"""The `tensor-router` commands that talk to a running router over its HTTP API (status,
load, unload, analytics, nodes, errors, benchmark, download), with the admin key from
`TENSOR_ROUTER_ADMIN_KEY`. router/cli.py adds them to its group beside the commands that run
or check the daemon itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    import httpx

from router.config import SettingsError, load_settings, parse_duration, resolve_config_path


@click.group()
def commands() -> None:
    """The commands of this module (router/cli.py lists them under its own group)."""


def _client(config: str | None, url: str | None) -> httpx.Client:
    if url is None:
        # Only the bind address is needed here; the key variables are this client's own
        # credentials, not the server's (the same admin key in YAML and env is no conflict).
        env = {k: v for k, v in os.environ.items() if not k.startswith("TENSOR_ROUTER_")}
        try:
            settings = load_settings(resolve_config_path(config, os.environ), env)
        except SettingsError as err:
            raise click.ClickException(str(err)) from None
        host = settings.server.host
        host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        url = f"http://{'[' + host + ']' if ':' in host else host}:{settings.server.port}"
    key = os.environ.get("TENSOR_ROUTER_ADMIN_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    # Imported here: `tensor-router start` never needs it (~4 MiB of the server's memory).
    import httpx

    return httpx.Client(base_url=url, headers=headers, timeout=None)


def _call(config: str | None, url: str | None, method: str, path: str, body: Any = None) -> Any:
    import httpx

    try:
        with _client(config, url) as client:
            response = client.request(method, path, json=body)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach the router: {exc}") from None
    payload = response.json() if response.content else {}
    if response.status_code >= 400:
        error = payload.get("error", payload) if isinstance(payload, dict) else payload
        message = error.get("message", error) if isinstance(error, dict) else error
        raise click.ClickException(f"{response.status_code}: {message}")
    return payload


url_option = click.option("--url", help="router base URL (default: from the config's server.bind)")
config_option = click.option("--config", "-c", help="router.yaml (default: $TENSOR_ROUTER_CONFIG)")
_F = TypeVar("_F", bound=Callable[..., Any])


def remote(fn: _F) -> _F:
    """--config and --url: how each command here finds the router."""
    return config_option(url_option(fn))


def on_node(record: str) -> Callable[[_F], _F]:
    """--node and --json, for a job that runs on a node and ends in a record."""

    def options(fn: _F) -> _F:
        fn = click.option("--json", "as_json", is_flag=True, help=f"print the {record} as JSON")(fn)
        return click.option("--node", help="node id (default: the router's own)")(fn)

    return options


@commands.command()
@remote
def status(config: str | None, url: str | None) -> None:
    """Runtimes, their states, in-flight requests and queues of a running router."""
    payload = _call(config, url, "GET", "/router/v1/status")
    runtimes = payload.get("runtimes", [])
    if not runtimes:
        click.echo("no runtimes")
    for rt in runtimes:
        click.echo(
            f"{rt['runtime']:<32} {rt['state']:<9} pid={rt.get('pid') or '-':<8}"
            f" in_flight={rt['in_flight']} queued={sum(rt.get('queued', {}).values())}"
        )
    queued = {k: v for k, v in payload.get("queued", {}).items() if v}
    if queued:
        click.echo("queued: " + json.dumps(queued))


@commands.command()
@remote
@click.argument("model")
@click.option(
    "--dry-run",
    is_flag=True,
    help="say what the load would evict and whether it fits; load nothing",
)
def load(config: str | None, url: str | None, model: str, dry_run: bool) -> None:
    """Load MODEL now (waits until it is ready)."""
    body: dict[str, Any] = {"model": model} | ({"dry_run": True} if dry_run else {})
    click.echo(json.dumps(_call(config, url, "POST", "/router/v1/load", body)))


@commands.command()
@remote
@click.argument("target", default="all")
def unload(config: str | None, url: str | None, target: str) -> None:
    """Unload TARGET: text, image, embeddings, voice, music or all (the default)."""
    click.echo(json.dumps(_call(config, url, "POST", "/router/v1/unload", {"target": target})))


@commands.command()
@remote
@click.option("--since", default="24h", show_default=True, help="window: 30m, 24h, 7d ...")
@click.option("--model", help="only this model")
def analytics(config: str | None, url: str | None, since: str, model: str | None) -> None:
    """Requests, errors, latency and tokens per model, from a running router's store."""
    now = time.time()
    query = f"?from={now - parse_duration(since):.3f}&to={now + 1:.3f}"
    if model:
        query += f"&model={model}"
    payload = _call(config, url, "GET", "/router/v1/site/analytics" + query)
    header = f"{'model':<28} {'requests':>8} {'errors':>6} {'p50 ms':>9} {'p95 ms':>9} {'wait p95':>9} {'tokens':>8}"
    click.echo(header)
    for row in [*payload.get("models", []), {"model": "(all)", **payload.get("totals", {})}]:
        duration, wait = row.get("duration_ms") or {}, row.get("queue_wait_ms") or {}
        click.echo(
            f"{str(row.get('model')):<28} {row.get('requests', 0):>8} {row.get('errors', 0):>6}"
            f" {_ms(duration.get('p50')):>9} {_ms(duration.get('p95')):>9}"
            f" {_ms(wait.get('p95')):>9} {(row.get('tokens') or {}).get('total', 0) or 0:>8}"
        )


@commands.command()
@remote
def nodes(config: str | None, url: str | None) -> None:
    """The cluster's nodes as this router sees them: role, URL, health, models, last contact."""
    payload = _call(config, url, "GET", "/router/v1/site/inventory")
    click.echo(f"{'node':<16} {'role':<10} {'state':<9} {'models':>6}  {'last contact':<20} url")
    for node in payload.get("nodes", []):
        contact = node.get("last_contact")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(contact)) if contact else "-"
        state = "ok" if node.get("available") else "down"
        click.echo(
            f"{str(node.get('node_id') or '?'):<16} {node.get('role', ''):<10} {state:<9}"
            f" {len(node.get('models') or []):>6}  {when:<20} {node.get('node_url') or '-'}"
        )
        if node.get("error"):
            click.echo(f"{'':<16} error: {node['error']}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


@commands.command()
@remote
@click.option("--clear", is_flag=True, help="delete every recorded load error")
def errors(config: str | None, url: str | None, clear: bool) -> None:
    """Recorded load errors of a running router (why a model did not start)."""
    if clear:
        click.echo(json.dumps(_call(config, url, "DELETE", "/router/v1/site/load-errors")))
        return
    payload = _call(config, url, "GET", "/router/v1/site/load-errors")
    records = payload.get("errors", [])
    if not records:
        click.echo("no load errors")
    for record in records:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.get("time") or 0))
        code = record.get("exit_code")
        click.echo(
            f"{when} {record.get('model')} [{record.get('backend')}] exit={code}: {record.get('reason')}"
        )


@commands.command()
@remote
@click.argument("model")
@click.option("--sections", help="comma list: runtime,llm,embed,image,voice,music or all")
@click.option(
    "--type",
    "kind",
    type=click.Choice(["general", "section"]),
    help="general: every section (the default without --sections)",
)
@click.option("--iterations", type=click.IntRange(1, 20), default=1, show_default=True)
@click.option("--timeout", help="the run's time limit: 90s, 30m, 2h (default 30m)")
@on_node("run record")
def benchmark(
    config: str | None,
    url: str | None,
    model: str,
    sections: str | None,
    kind: str | None,
    iterations: int,
    timeout: str | None,
    node: str | None,
    as_json: bool,
) -> None:
    """Benchmark MODEL on a running router (waits for the run to finish)."""
    body: dict[str, Any] = {"model_id": model, "iterations": iterations}
    if sections:
        body["sections"] = [part.strip() for part in sections.split(",") if part.strip()]
    if kind:
        body["type"] = kind
    if timeout:
        body["timeout_seconds"] = parse_duration(timeout)
    if node:
        body["node_id"] = node
    record = _call(config, url, "POST", "/router/v1/benchmarks/run", body)
    if as_json:
        click.echo(json.dumps(record, indent=2))
    else:
        _print_record(record)
    if record.get("status") == "failed":
        sys.exit(1)


def _print_record(record: dict[str, Any]) -> None:
    click.echo(
        f"{record.get('model_id')} {record.get('type')} run {record.get('run_id')}: "
        f"{record.get('status')} in {_ms(record.get('duration_ms'))} ms"
    )
    for name, section in (record.get("sections") or {}).items():
        click.echo(f"  {name:<8} {section.get('status')}")
        for m in section.get("metrics") or []:
            click.echo(f"    {m.get('name'):<26} {_value(m.get('value'))} {m.get('unit')}")
        if section.get("error"):
            click.echo(f"    error: {section['error']}")


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}".rstrip("0").rstrip(".")


@commands.command()
@remote
@click.argument("repository")
@click.argument("files", nargs=-1)
@click.option("--revision", help="branch, tag or commit (default: main)")
@click.option("--replace", is_flag=True, help="replace files already in the library")
@click.option("--unsafe-ok", is_flag=True, help="download files the hub's scan flags")
@on_node("finished job")
def download(
    config: str | None,
    url: str | None,
    repository: str,
    files: tuple[str, ...],
    revision: str | None,
    replace: bool,
    unsafe_ok: bool,
    node: str | None,
    as_json: bool,
) -> None:
    """Download FILES (paths or patterns; default: the whole repository) of a Hugging Face
    REPOSITORY through a running router, with a progress bar."""
    import httpx

    from router.downloads.follow import BASE, follow

    body: dict[str, Any] = {
        "repository": repository,
        "files": list(files),
        "confirm_replace": replace,
        "confirm_unsafe": unsafe_ok,
    }
    body.update({k: v for k, v in (("revision", revision), ("node_id", node)) if v})
    job = _call(config, url, "POST", f"{BASE}/jobs", body)
    click.echo(
        f"job {job['id']}: {len(job['files'])} file(s), {job['bytes_total']} bytes", err=True
    )
    with _client(config, url) as client, _progress(repository, job["bytes_total"]) as on_event:
        try:
            state = follow(client, job["id"], on_event)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"lost the job's event stream: {exc}") from None
    final = _call(config, url, "GET", f"{BASE}/jobs/{job['id']}")
    click.echo(
        json.dumps(final, indent=2) if as_json else f"{state}: {final.get('error') or repository}"
    )
    if state != "completed":
        sys.exit(1)


@contextlib.contextmanager
def _progress(label: str, total: int) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A progress bar on a terminal; elsewhere (a log, a pipe) a line per second and one at
    the end, so a redirected run still shows how far it got."""
    if sys.stderr.isatty():
        with click.progressbar(length=max(total, 1), label=label, file=sys.stderr) as bar:
            shown = [0]

            def update(event: dict[str, Any]) -> None:
                done = int(event.get("bytes_done") or 0)
                bar.update(max(0, done - shown[0]))
                shown[0] = max(shown[0], done)

            yield update
        return
    last = [0.0]

    def line(event: dict[str, Any]) -> None:
        done, final = int(event.get("bytes_done") or 0), event.get("event") == "state"
        if final or time.monotonic() - last[0] >= 1.0:
            last[0] = time.monotonic()
            pct = 100 * done // max(total, 1)
            click.echo(f"{label}: {done}/{total} bytes ({pct}%) {event.get('state')}", err=True)

    yield line
