"""fieldmem's version, in a module of its own: any module can import it without importing the package's API.

``from fieldmem import __version__`` inside fieldmem would import
``fieldmem/__init__.py``, which imports the API, which imports the engine:
an import cycle. Keep it equal to ``version`` in pyproject.toml.
"""

__version__ = "0.1.0"
