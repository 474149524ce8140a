"""`tensor-router`: start the daemon, check a config, write the demo models; the commands
that talk to a running router are router/cli_remote.py's, listed here under the same group."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    pass

from router import __version__
from router.cli_remote import commands, config_option
from router.config import (
    Catalog,
    Settings,
    SettingsError,
    load_settings,
    resolve_config_path,
)
from router.errors import StoreUnavailable

OLLAMA_PORT = 11434


def _settings(config: str | None) -> Settings:
    try:
        return load_settings(resolve_config_path(config, os.environ))
    except SettingsError as err:
        raise click.ClickException(str(err)) from None


@click.group()
@click.version_option(__version__, prog_name="tensor-router")
def main() -> None:
    """One base URL in front of every local AI backend."""


@main.command()
@click.option("--config", "-c", help="router.yaml (default: $TENSOR_ROUTER_CONFIG)")
@click.option("--ollama", is_flag=True, help="also listen on 127.0.0.1:11434, Ollama's port")
@click.option("--log-level", default="info", show_default=True)
def start(config: str | None, ollama: bool, log_level: str) -> None:
    """Run the router in the foreground until SIGTERM or SIGINT."""
    from router.server import ListenError, serve

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = _settings(config)
    extra = [("127.0.0.1", OLLAMA_PORT)] if ollama else []
    try:
        _run(serve(settings, extra_binds=extra))
    except StoreUnavailable as err:  # a full or read-only disk at start: one line, no traceback
        raise click.ClickException(err.message) from None
    except ListenError as err:
        raise click.ClickException(str(err)) from None


def _run(main_coro: Any) -> None:
    """uvloop when installed (a faster event loop; TENSOR_ROUTER_LOOP=asyncio turns it off)."""
    if os.environ.get("TENSOR_ROUTER_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.run(main_coro)
            return
    asyncio.run(main_coro)


def _scanned_catalog(settings: Settings) -> Catalog:
    """The catalog as `start` would see it: every .kcpps read once, no watcher left running."""
    catalog = Catalog(settings.models.config_dir, settings.backend.mode, settings.models.file_roots)

    async def scan() -> None:
        await catalog.refresh()
        await catalog.close()

    asyncio.run(scan())
    return catalog


@main.command("check-config")
@click.option("--config", "-c", help="router.yaml (default: $TENSOR_ROUTER_CONFIG)")
def check_config(config: str | None) -> None:
    """Validate router.yaml and every .kcpps file it points at."""
    settings = _settings(config)
    catalog = _scanned_catalog(settings)
    click.echo(f"{settings.source or 'defaults'}: ok ({len(catalog.all_configs())} model configs)")
    for name, problem in catalog.errors.items():
        click.echo(f"{name}: {problem}", err=True)
    if catalog.errors:
        sys.exit(1)


@main.command()
@click.option("--config", "-c", help="router.yaml (default: $TENSOR_ROUTER_CONFIG)")
def models(config: str | None) -> None:
    """List the model IDs the catalog serves."""
    catalog = _scanned_catalog(_settings(config))
    for cfg in catalog.all_configs():
        lanes = ",".join(sorted(lane.value for lane in cfg.lanes))
        image = f" image:{cfg.image_id}" if cfg.image_id else ""
        click.echo(f"{cfg.id}\t{cfg.backend_mode.value}\t{lanes}{image}")


@main.command()
def version() -> None:
    """Print the version."""
    click.echo(__version__)


@main.command("demo-models")
@click.argument("out_dir", type=click.Path(path_type=Path), default=Path("data/demo"))
@click.option("--with-image/--no-image", default=False, help="also the ~290 MB SDXS image model")
@click.option("--with-whisper/--no-whisper", default=True)
def demo_models(out_dir: Path, with_image: bool, with_whisper: bool) -> None:
    """Write tiny random-weight models and their .kcpps files (no download needed)."""
    from router.demo_models import generate_demo_models

    written = generate_demo_models(out_dir, image=with_image, whisper=with_whisper)
    for name, path in written.items():
        click.echo(f"{name}\t{path}")


@main.command("demo-config")
@config_option
@click.option(
    "--data-dir", type=click.Path(path_type=Path), default=Path("data/demo"), show_default=True
)
def demo_config(config: str | None, data_dir: Path) -> None:
    """Print the router.yaml to serve: CONFIG when its .kcpps files point at real models, else
    a demo config over tiny generated models (written once into DATA_DIR)."""
    from router.demo_models import generate_demo_models, write_demo_router_yaml

    settings = _settings(config)
    catalog = _scanned_catalog(settings)
    if any(not catalog.missing_files(c) for c in catalog.configs()):
        click.echo(settings.source)
        return
    click.echo(f"{settings.models.config_dir}: no model file found; using demo models", err=True)
    generate_demo_models(data_dir)
    click.echo(write_demo_router_yaml(data_dir, settings.source))


for _command in commands.commands.values():
    main.add_command(_command)


if __name__ == "__main__":
    main()
