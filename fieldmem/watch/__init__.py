"""``fieldmem check --watch``: everything that serves only the watch loop, in one place.

- :mod:`.loop` (the parent, which never imports jax): polls the files, asks
  the worker to check again, prints each new row and what changed;
- :mod:`.modules` (the worker): the local modules a target imports, and
  executing edited ones again;
- :mod:`.fingerprint` (the worker): a digest of a target's code, settings and
  the values it reads, so that an unchanged target is not checked again.

Callers import the submodules: the worker's two never load the loop (typer),
and the loop never loads them.
"""

__all__ = ["fingerprint", "loop", "modules"]
