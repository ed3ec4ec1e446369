"""What the user asked for, with no jax: target specs, the case registry, [tool.fieldmem] config, option parsing.

``options`` holds the shared defaults and validators, ``spec`` the small
option parsers, ``tolerance`` how much a figure may grow against a baseline, ``registry`` ``fieldmem.case``/``fieldmem.chain``, ``target``
specs -> targets, ``config`` the ``[tool.fieldmem]`` table, and ``build`` the
one request of a ``fieldmem check`` run (flags over config, every option rule).
Nothing here compiles, prints or imports jax; callers import the submodules.
"""

__all__ = ["build", "config", "options", "registry", "spec", "target", "tolerance"]
