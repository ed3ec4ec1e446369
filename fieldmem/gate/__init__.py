"""Gating a report: one diff engine, baselines and the comparison of saved reports.

``diff`` is the one definition of what is the same copy, alias and figure in two
runs (and how a change reads); ``baseline`` gates a run against a saved baseline
and ``compare`` puts saved reports side by side, both through ``diff``. How much a
figure may move is the request's (:mod:`fieldmem.request.tolerance`). Nothing here
imports jax, prints or exits; renderers format what these modules return.
"""

__all__ = ["baseline", "compare", "diff"]
