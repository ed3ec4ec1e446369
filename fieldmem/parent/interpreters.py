"""Which Python the workers run under: this one, one the user prepared (``--python``), or a cached
environment per jax release (``--jax``, :mod:`fieldmem.parent.envs`).

A worker needs only the standard library, jax and fieldmem's own driver, request and ground modules
(``tests/parent/test_isolation.py``), so under another interpreter it imports fieldmem from this one's package
folder (first on its ``PYTHONPATH``: :func:`fieldmem.parent.envs.package_folder`, a folder of one link
where fieldmem is installed in a ``site-packages``, so this environment's jax never comes along) and
everything else (jax, the user's libraries) from its own installation.

Standard library only; runs in the parent, which never imports jax.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from fieldmem.model.versions import check_supported
from fieldmem.parent.envs import JaxEnv, ensure_env, folder_in_use, package_folder, user_packages, worker_environment
from fieldmem.parent.spawn import Interpreter

__all__ = [
    "compilers_interpreter",
    "env_interpreter",
    "in_use",
    "interpreter_for_python",
    "interpreters_for",
    "worker_interpreters",
]


def interpreter_for_python(python: Path) -> Interpreter:
    """``--python PATH``: the workers run under that interpreter, with its own jax and libraries (a relative
    ``PATH`` is relative to where fieldmem runs, never looked up on ``PATH``)."""
    python = python.absolute()
    venv = python.parent.parent if (python.parent.parent / "pyvenv.cfg").is_file() else None
    environ = {
        "PYTHONPATH": package_folder(),
        "VIRTUAL_ENV": str(venv) if venv is not None else "",
        "PYTHONHOME": "",
        "PYTHONNOUSERSITE": "1",
    }
    return Interpreter(
        python=str(python),
        environ=tuple(environ.items()),
        label=f"python {python}",
        remedy=f"--python names the Python of an environment that has jax (its bin/python); {python} is not one",
    )


def env_interpreter(env: JaxEnv, label: str) -> Interpreter:
    """The workers' interpreter in the cached environment ``env``, held in use while they run
    (:func:`~fieldmem.parent.envs.env_in_use`), saying how to make it again should it not work."""
    return Interpreter(
        python=str(env.python),
        environ=tuple(worker_environment(env).items()),
        label=label,
        remedy=(
            f"the cached environment {env.folder} is not usable; remove it (fieldmem envs remove {env.folder.name}) "
            "and it is made again on first use"
        ),
        env_folder=str(env.folder),
    )


def worker_interpreters(
    versions: Sequence[str] | None,
    python: Path | None,
    backends: Sequence[str] | None,
    say: Callable[[str], None] | None = None,
) -> list[Interpreter | None]:
    """The interpreters to check under, in order: one per ``--jax`` release (its environment made on first
    use, with the compilers of the deviceless ``backends`` and this environment's libraries built on jax,
    :func:`~fieldmem.parent.envs.user_packages`), the ``--python`` one, or this one (None)."""
    if python is not None:
        return [interpreter_for_python(python)]
    if not versions:
        return [None]
    plugins = tuple(sorted({name.split(":")[0] for name in backends or () if ":" in name}))
    packages = user_packages()
    found: list[Interpreter | None] = []
    for version in versions:
        env = ensure_env(version, plugins=plugins, packages=packages, progress=say)
        found.append(env_interpreter(env, f"jax {version}"))
    return found


def compilers_interpreter(
    platforms: Sequence[str], jax_version: str, say: Callable[[str], None] | None = None
) -> Interpreter:
    """Workers for deviceless backends whose compiler (libtpu, the CUDA plugin) is not installed here: a
    cached environment of this environment's jax release with those compilers and this environment's
    libraries built on jax, so that the user's own environment never has to hold them."""
    plugins = tuple(sorted(set(platforms)))
    env = ensure_env(jax_version, plugins=plugins, packages=user_packages(), progress=say)
    return env_interpreter(env, f"jax {jax_version} with {', '.join(plugins)}")


def interpreters_for(
    versions: Sequence[str] | None,
    python: Path | None,
    backends: Sequence[str | None],
    elsewhere: Sequence[str],
    say: Callable[[str], None] | None = None,
) -> list[tuple[Interpreter | None, list[str | None]]]:
    """Which workers check which backends: each ``--jax`` release (or ``--python``'s interpreter) all of
    them; else this environment those it has the compilers of, and a cached environment of this jax with
    the missing compilers the others, ``elsewhere`` (:func:`compilers_interpreter`)."""
    if versions or python is not None or not elsewhere:
        names = [b for b in backends if b is not None] or None
        return [(i, list(backends)) for i in worker_interpreters(versions, python, names, say)]
    # here, not at the top: importlib.metadata adds 25 ms to ``import fieldmem.parent.interpreters`` (-X importtime,
    # median of 7, 2026-12-06), needed only when a backend's compiler is elsewhere
    from importlib import metadata

    version = metadata.version("jax")
    check_supported(version)
    here: list[str | None] = [b for b in backends if b not in elsewhere]
    if say is not None:
        say(f"{', '.join(elsewhere)}: its compiler is not installed here; checking in a cached environment that has it")
    away: list[str | None] = list(elsewhere)
    plan: list[tuple[Interpreter | None, list[str | None]]] = [
        (compilers_interpreter(elsewhere_platforms(elsewhere), version, say), away)
    ]
    return ([(None, here)] if here else []) + plan


def elsewhere_platforms(backends: Sequence[str]) -> list[str]:
    """The platforms (``tpu``, ``gpu``) of deviceless backend names."""
    return [name.split(":")[0] for name in backends]


@contextlib.contextmanager
def in_use(interpreter: Interpreter | None) -> Iterator[None]:
    """Hold the cached environment ``interpreter`` belongs to in use for the block (none: nothing held):
    ``fieldmem envs remove`` refuses it while its workers run (:func:`~fieldmem.parent.envs.env_in_use`)."""
    if interpreter is None or not interpreter.env_folder:
        yield
        return
    with folder_in_use(Path(interpreter.env_folder)):
        yield
