"""A target's fingerprint: what its check depends on in the user's code, hashed, so ``--watch`` re-checks
only the targets an edit changed.

After a module is loaded again (:mod:`fieldmem.worker.user_modules`), each of its
targets is a new object. :func:`target_fingerprint` hashes what decides its
check: the target's settings (spec, name, donation, static arguments,
expectations, budgets, options), and for each function it holds (the
function, the args factory, a chain's steps and their extras) its code
(bytecode, constants, names, line and column positions: a report names
lines), its defaults and closure, and the value of every global it names,
functions followed recursively. A module of an installed package (jax,
numpy) stands for itself by name: it is never loaded again. A local module
named as a global stands for its file's bytes. A ``jax.jit`` object stands
for its function and its jit options (``PjitInfo``, read through
:func:`~fieldmem.driver.prepare.user_jit_info`).

Anything it cannot hash for certain (an object of a class it does not know,
a library wrapper) makes the fingerprint None: the target is then checked
again on every change of its module. Two equal fingerprints mean the same
code, the same settings and the same values: the same program to check.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import sys
import types
from typing import Any

from fieldmem.driver.prepare import user_jit_info
from fieldmem.model.libraries import is_library_file

__all__ = ["is_local_file", "target_fingerprint"]

_MAX_DEPTH = 64
_DYNAMIC = frozenset({"globals", "vars", "eval", "exec", "__import__", "locals"})
_MAX_ITEMS = 100_000  # a container larger than this is not hashed item by item: unknown


class _Unknown(Exception):
    """Something the fingerprint cannot vouch for."""


def is_local_file(file: str | None) -> bool:
    """Whether ``file`` is the user's own Python source: the files ``--watch`` watches and loads again.
    Not library code as :func:`fieldmem.model.libraries.is_library_file` defines it for source lines (the
    standard library, installed packages, fieldmem), the one definition of both."""
    return file is not None and file.endswith(".py") and not is_library_file(file)


def _file_digest(file: str) -> str:
    try:
        with open(file, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError as exc:
        raise _Unknown(file) from exc


class _Hasher:
    def __init__(self) -> None:
        self.seen: dict[int, int] = {}  # id -> its number, for cycles and repeats
        self.keep: list[Any] = []  # the objects seen, alive while hashing (their ids stay theirs)

    def value(self, obj: Any, depth: int = 0) -> Any:
        """A structure of plain values that stands for ``obj``."""
        if depth > _MAX_DEPTH:
            raise _Unknown("too deep")
        if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
            return (type(obj).__name__, repr(obj))
        if isinstance(obj, enum.Enum):
            return ("enum", type(obj).__module__, type(obj).__qualname__, obj.name)
        key = id(obj)
        if key in self.seen:
            return ("seen", self.seen[key])
        self.seen[key] = len(self.seen)
        self.keep.append(obj)
        deeper = depth + 1
        if isinstance(obj, (tuple, list, set, frozenset)):
            if len(obj) > _MAX_ITEMS:
                raise _Unknown("too large")
            items = [self.value(item, deeper) for item in obj]
            if isinstance(obj, (set, frozenset)):
                items = sorted(items, key=repr)
            return (type(obj).__name__, tuple(items))
        if isinstance(obj, dict):
            if len(obj) > _MAX_ITEMS:
                raise _Unknown("too large")
            pairs = [(self.value(k, deeper), self.value(v, deeper)) for k, v in obj.items()]
            return ("dict", tuple(sorted(pairs, key=repr)))
        if isinstance(obj, types.ModuleType):
            return self.module(obj)
        if isinstance(obj, types.CodeType):
            return self.code(obj, deeper)
        if isinstance(obj, types.FunctionType):
            return self.function(obj, deeper)
        if isinstance(obj, types.MethodType):
            return ("method", self.value(obj.__func__, deeper), self.value(obj.__self__, deeper))
        if isinstance(obj, (types.BuiltinFunctionType, type)):
            return self.named(obj, deeper)

        info = user_jit_info(obj)
        if info is not None:
            text = repr(info)
            if " at 0x" in text:  # an option shown by address: not comparable across loads
                raise _Unknown("jit options")
            return ("jit", text, self.value(getattr(obj, "_fun", None), deeper))
        if _library_object(obj):
            return ("named", obj.__module__, obj.__name__)
        if type(obj).__name__ == "partial" and hasattr(obj, "func"):  # functools.partial
            return (
                "partial",
                self.value(obj.func, deeper),
                self.value(obj.args, deeper),
                self.value(obj.keywords, deeper),
            )
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            fields = tuple((f.name, self.value(getattr(obj, f.name, None), deeper)) for f in dataclasses.fields(obj))
            return ("dataclass", self.named(type(obj), deeper), fields)
        if _local_instance(obj):  # an object of the user's own class: its class and its attributes
            return ("object", self.named(type(obj), deeper), self.value(dict(vars(obj)), deeper))
        if hasattr(obj, "__array__") and hasattr(obj, "shape") and hasattr(obj, "dtype"):
            return self.array(obj)
        if type(obj).__module__ == "numpy" and type(obj).__name__.startswith("dtype"):
            return ("dtype", str(obj))
        raise _Unknown(type(obj).__qualname__)

    def named(self, obj: Any, depth: int) -> Any:
        """A class or a builtin: by name when it comes from a library, by its contents when it is the user's."""
        module = getattr(obj, "__module__", None) or ""
        name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", "")
        loaded = sys.modules.get(module)
        if isinstance(obj, type) and loaded is not None and is_local_file(getattr(loaded, "__file__", None)):
            members = tuple(
                (key, self.member(key, value, depth + 1))
                for key, value in vars(obj).items()
                if key not in ("__dict__", "__weakref__", "__doc__")
            )
            bases = tuple(self.value(base, depth + 1) for base in obj.__bases__)
            return ("class", module, name, bases, members)
        return ("named", module, name)

    def member(self, key: str, value: Any, depth: int) -> Any:
        """A class member; a dataclass's own bookkeeping by what it says (its options and fields)."""
        if key == "__dataclass_params__":
            return ("params", repr(value))
        if key == "__dataclass_fields__":
            return (
                "fields",
                tuple(
                    (
                        name,
                        repr(f.type),
                        repr(f._field_type),
                        f.init,
                        f.compare,
                        self.value(None if f.default is dataclasses.MISSING else f.default, depth),
                        self.value(None if f.default_factory is dataclasses.MISSING else f.default_factory, depth),
                        self.value(dict(f.metadata), depth),
                    )
                    for name, f in value.items()
                ),
            )
        if (
            isinstance(value, types.FunctionType)
            and key.startswith("__")
            and value.__code__.co_filename.startswith("<")
        ):  # a method dataclasses (or namedtuple) made from the fields hashed above
            return ("generated", key)
        return self.value(value, depth)

    def module(self, module: types.ModuleType) -> Any:
        file = getattr(module, "__file__", None)
        if is_local_file(file):
            assert file is not None
            return ("module", module.__name__, _file_digest(file))
        return ("module", module.__name__)

    def code(self, code: types.CodeType, depth: int) -> Any:
        consts = tuple(self.value(c, depth + 1) for c in code.co_consts)
        return (
            "code",
            code.co_code,
            consts,
            code.co_names,
            code.co_varnames,
            code.co_freevars,
            code.co_cellvars,
            code.co_flags,
            code.co_argcount,
            code.co_kwonlyargcount,
            code.co_posonlyargcount,
            code.co_filename,
            code.co_firstlineno,
            tuple(getattr(code, "co_positions", lambda: ())()),  # lines and columns: the report names them
            getattr(code, "co_linetable", b""),
            getattr(code, "co_qualname", code.co_name),
        )

    def function(self, fn: types.FunctionType, depth: int) -> Any:
        file = fn.__code__.co_filename
        if file.startswith("<"):  # made by exec or eval: no file says what it is
            raise _Unknown(file)
        if not is_local_file(file):  # a library's function: never loaded again, the same by name
            return ("named", fn.__module__, fn.__qualname__, file)
        deeper = depth + 1
        closure = tuple(self.value(cell.cell_contents, deeper) for cell in fn.__closure__ or () if _filled(cell))
        names = _global_names(fn.__code__)
        if names & _DYNAMIC:  # reads names it computes: what it depends on cannot be listed
            raise _Unknown("dynamic lookup")
        namespace = fn.__globals__
        builtins_ = namespace.get("__builtins__", {})
        if isinstance(builtins_, types.ModuleType):
            builtins_ = vars(builtins_)
        used = []
        for name in sorted(names):
            if name in namespace:
                used.append((name, self.value(namespace[name], deeper)))
            elif name in builtins_:
                used.append((name, ("builtin", name)))
        return (
            "function",
            fn.__module__,
            self.code(fn.__code__, deeper),
            self.value(fn.__defaults__, deeper),
            self.value(fn.__kwdefaults__, deeper),
            closure,
            tuple(used),
        )

    def array(self, obj: Any) -> Any:
        try:
            import numpy as np

            data = np.asarray(obj)
        except Exception as exc:
            raise _Unknown("array") from exc
        sharding = getattr(obj, "sharding", None)
        text = repr(sharding) if sharding is not None else ""
        if " at 0x" in text:
            raise _Unknown("sharding")
        return (
            "array",
            type(obj).__qualname__,
            str(data.dtype),
            tuple(data.shape),
            hashlib.sha256(data.tobytes()).hexdigest(),
            text,
        )


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _local_instance(obj: Any) -> bool:
    """An instance of a class the user's code defines, whose whole state is its ``__dict__``."""
    cls = type(obj)
    module = sys.modules.get(cls.__module__ or "")
    if module is None or not is_local_file(getattr(module, "__file__", None)):
        return False
    if not hasattr(obj, "__dict__") or any("__slots__" in vars(c) for c in cls.__mro__[:-1]):
        return False
    return all(c.__module__ == "builtins" or _is_local_class(c) for c in cls.__mro__)


def _is_local_class(cls: type) -> bool:
    module = sys.modules.get(cls.__module__ or "")
    return module is not None and is_local_file(getattr(module, "__file__", None))


def _library_object(obj: Any) -> bool:
    """An object a library module holds under its own name (``numpy.add``, ``jax.nn.relu``): made when the
    library was imported, never again, so the same by name."""
    name = getattr(obj, "__name__", None)
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    if not isinstance(name, str) or module is None or is_local_file(getattr(module, "__file__", None)):
        return False
    try:
        return getattr(module, name, None) is obj
    except Exception:  # a module whose attribute raises: not vouched for
        return False


def _global_names(code: types.CodeType) -> set[str]:
    """Every name ``code`` (and the code nested in it: lambdas, comprehensions, inner functions) may load
    from its globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def target_fingerprint(target: Any) -> str | None:
    """A digest of everything ``target``'s check depends on in the user's code; None when something in it
    cannot be hashed for certain (then it is checked again on every change of its module)."""
    hasher = _Hasher()
    try:
        structure = hasher.value(target)
    except (_Unknown, RecursionError):
        return None
    except Exception:
        return None
    return hashlib.sha256(repr(structure).encode()).hexdigest()
