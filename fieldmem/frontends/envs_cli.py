"""The ``fieldmem envs`` commands: the cached jax environments (:mod:`fieldmem.parent.envs` makes, finds and
removes them). Nothing is computed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from fieldmem.frontends.command_line import fail, say
from fieldmem.model.errors import FieldmemError
from fieldmem.model.escaping import visible

__all__ = ["envs_app"]

envs_app = typer.Typer(
    name="envs",
    help="The cached environments with another jax that --jax checks under: list, create, remove.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _env_what(env: Any) -> str:
    """What an environment holds, as ``fieldmem envs`` shows it: ``jax 0.9.2, jaxlib 0.9.2, libtpu 0.0.37``."""
    return ", ".join(
        f"{name} {version}" for name, version in (("jax", env.jax), ("jaxlib", env.jaxlib), *env.plugins, *env.packages)
    )


@envs_app.command("list")
def envs_list() -> None:
    """List the cached environments: version, jax/jaxlib, plugins and packages, size on disk, folder."""
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.model.units import format_bytes
    from fieldmem.parent.envs import env_root, env_size, list_envs

    found = list_envs()
    if not found:
        typer.echo(f"no jax environments in {visible(str(env_root()))} (fieldmem envs create VERSION makes one)")
        return
    rows = [("version", "installed", "size", "folder")]
    rows += [(env.version, _env_what(env), format_bytes(env_size(env)), str(env.folder)) for env in found]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for row in rows:
        typer.echo(visible("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths)), row[3]])))


@envs_app.command("create")
def envs_create(
    version: Annotated[str, typer.Argument(help="The jax release, e.g. 0.9.2 (jaxlib at the same).")],
    plugin: Annotated[
        list[str] | None,
        typer.Option(
            "--plugin",
            help="A backend kind (tpu, gpu: its deviceless compilers at that jax) or a requirement; repeatable.",
        ),
    ] = None,
    requirements: Annotated[
        Path | None, typer.Option("--requirements", "-r", help="A requirements file installed there too.")
    ] = None,
    package: Annotated[
        list[str] | None,
        typer.Option("--package", help="A package of yours (flax, 'optax>=0.2') at a release that fits; repeatable."),
    ] = None,
) -> None:
    """Make the environment for a jax release now (or show the cached one), as --jax does on first use."""
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.parent.envs import ensure_env

    try:
        env = ensure_env(
            version,
            plugins=tuple(plugin or ()),
            requirements=requirements,
            packages=tuple(package or ()),
            progress=say,
        )
    except FieldmemError as exc:
        raise fail(exc.message) from None
    typer.echo(visible(f"jax {env.version}: {_env_what(env)} in {env.folder}"))


@envs_app.command("remove")
def envs_remove(
    version: Annotated[str, typer.Argument(help="The jax release (every environment of it), or a folder's name.")],
) -> None:
    """Remove the cached environments of a jax release."""
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.parent.envs import remove_env

    try:
        removed = remove_env(version)
    except FieldmemError as exc:
        raise fail(exc.message) from None
    for env in removed:
        typer.echo(visible(f"removed jax {env.version}: {_env_what(env)} in {env.folder}"))
