"""The name pytest knows the plugin by (the ``pytest11`` entry point, ``-p fieldmem.pytest_plugin``).

The plugin is :mod:`fieldmem.frontends.pytest_plugin`; pytest reads hooks and fixtures from the module it
registers, so they are named here. Registering this module (never the other as well) keeps
``-p fieldmem.pytest_plugin`` and the entry point one plugin, not two.
"""

from __future__ import annotations

from fieldmem.frontends.pytest_plugin import (
    FieldmemCheck,
    Limits,
    fieldmem_check,
    fieldmem_fit,
    pytest_addoption,
    pytest_configure,
    pytest_runtest_setup,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_testnodedown,
    pytest_unconfigure,
)

__all__ = [
    "FieldmemCheck",
    "Limits",
    "fieldmem_check",
    "fieldmem_fit",
    "pytest_addoption",
    "pytest_configure",
    "pytest_runtest_setup",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_testnodedown",
    "pytest_unconfigure",
]
