"""Pytree paths in words: the names the report gives argument and output leaves.

``jax.tree_util.keystr`` writes a child of a pytree node registered without
keys (``register_pytree_node``: many library containers) as ``[<flat index
0>]``; here it is ``[0]``, like a sequence index. Other keys read as
``keystr`` reads them: ``['w']`` (dict), ``[2]`` (sequence), ``.kernel``
(attribute). jax is imported on first use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["path_string"]


def path_string(path: Iterable[Any]) -> str:
    """``path`` (the keys ``tree_flatten_with_path`` gives) as the report writes it after the argument's name."""
    import jax

    tree = jax.tree_util
    parts: list[str] = []
    for key in path:
        if isinstance(key, tree.FlattenedIndexKey):
            parts.append(f"[{key.key}]")
        else:
            parts.append(tree.keystr((key,)))
    return "".join(parts)
