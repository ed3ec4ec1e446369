"""The records every layer shares, and nothing that drives jax or prints: the report and its JSON codec,
what the driver reads (readings), the words of copies and findings, every error class, byte units, safe
file writing, the escaping rule for user text, the supported jax releases and the bundled GPU specs."""

#: fieldmem's version (keep it equal to ``version`` in pyproject.toml). Here, in a package that loads
#: nothing else, so that any layer may import it and ``import fieldmem`` stays light (tests/frontends/test_import_cost.py).
__version__ = "0.1.0"
