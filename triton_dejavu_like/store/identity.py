"""Who we are: package, Triton, CUDA/ROCm and GPU identity, and stable hashes of kernels and settings.

Every hash here is stable across processes and machines: it is computed from source text, typed
JSON and names, never from ``repr()`` of an object with an address or from ``id()``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from .. import _compat, _env
from ..codec import EncodingError, canonical_json, encode_value

HASH_LENGTH = 16
#: The longest path component :func:`sanitize` makes (longer names are cut and end in their hash).
MAX_COMPONENT_LENGTH = 80
_SAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_LENGTH]


def stable_hash(data: Any) -> str:
    """Hash of JSON-able data through its canonical form."""
    return short_hash(canonical_json(data))


def sanitize(name: str) -> str:
    """A readable single path component: no separators, no '..', no spaces, never empty."""
    cleaned = _SAFE.sub("_", name.strip()).strip("._")
    if not cleaned:
        cleaned = "unnamed"
    if len(cleaned) > MAX_COMPONENT_LENGTH:
        cleaned = f"{cleaned[: MAX_COMPONENT_LENGTH - HASH_LENGTH - 1]}-{short_hash(name)}"
    return cleaned


def package_major_minor() -> str:
    from .. import __version__

    return ".".join(__version__.split(".")[:2])


@dataclass(frozen=True)
class Platform:
    """The machine a result was tuned on: the part of the storage path above the kernel."""

    triton: str
    toolchain: str  # "cuda_12.8" | "rocm_6.2.1" | "cpu"
    gpu: str  # sanitised device name, or "interpreter"
    backend: str  # "cuda" | "hip" | "interpreter" | "unknown"
    capability: tuple[int, int] | None  # CUDA compute capability

    def as_dict(self) -> dict[str, Any]:
        return {
            "dejavu": package_major_minor(),
            "triton": self.triton,
            "toolchain": self.toolchain,
            "gpu": self.gpu,
        }


@functools.lru_cache(maxsize=2)
def detect_platform(interpreted: bool) -> Platform:
    """The platform; under the interpreter it is ``cpu``/``interpreter`` whatever GPU is present."""
    if interpreted:
        return Platform(_compat.TRITON_VERSION_STR, "cpu", "interpreter", "interpreter", None)
    import torch

    rocm_override = _env.rocm_version_override()
    cuda_override = _env.cuda_version_override()
    hip = getattr(torch.version, "hip", None)
    backend = "hip" if (hip or rocm_override) else "cuda"
    if backend == "hip":
        version = rocm_override or ".".join(str(hip).split("-")[0].split(".")[:3])
        toolchain = f"rocm_{version}"
    else:
        version = cuda_override or str(torch.version.cuda or "unknown")
        toolchain = f"cuda_{'.'.join(version.split('.')[:2])}"
    name = "unknown"
    capability = None
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        name = torch.cuda.get_device_name(index)
        capability = tuple(torch.cuda.get_device_capability(index))
    else:
        backend = "unknown"
    return Platform(_compat.TRITON_VERSION_STR, sanitize(toolchain), sanitize(name), backend, capability)


@dataclass(frozen=True)
class KernelIdentity:
    """Everything a stored result depends on; it decides the file's path (see :mod:`.layout`)."""

    platform: Platform
    kernel: str
    autotune_config: str
    code_version: str
    tune_features: str
    kernel_configs: str
    tag: str

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.platform.as_dict(),
            "kernel": self.kernel,
            "autotune_config": self.autotune_config,
            "code_version": self.code_version,
            "tune_features": self.tune_features,
            "kernel_configs": self.kernel_configs,
            "tag": self.tag,
        }


# --- kernel identity ---------------------------------------------------------------------------------

_SKIPPED_FIELDS = frozenset({"ctx", "type_comment", "decorator_list", "type_params", "kind"})


def _field_value(node: ast.AST, field: str) -> Any:
    """The value of a field of ``node``, as every Python from 3.10 on parses it. Python 3.12 ends the
    format spec of an f-string (``{x:{width}}``) with an empty string constant that 3.10, 3.11 and
    3.13 leave out: empty parts of an f-string are dropped, so the text stays the same."""
    value = getattr(node, field, None)
    if isinstance(node, ast.JoinedStr) and isinstance(value, list):
        value = [v for v in value if not (isinstance(v, ast.Constant) and v.value == "")]
    return value


def _canonical_ast(node: Any) -> str:
    """A Python-version-stable text of an AST: no positions, decorators or load/store contexts."""
    if isinstance(node, ast.AST):
        parts = [type(node).__name__]
        for field in node._fields:
            if field in _SKIPPED_FIELDS:
                continue
            value = _field_value(node, field)
            if value is None or value == []:
                continue
            parts.append(f"{field}={_canonical_ast(value)}")
        return "(" + " ".join(parts) + ")"
    if isinstance(node, list):
        return "[" + " ".join(_canonical_ast(v) for v in node) + "]"
    return repr(node)


def _function_node(obj: Any, fn: Any) -> ast.AST:
    """The AST of the function, without decorators or docstring (of a lambda: those on its line).

    A JITFunction keeps its source (read once when it was decorated): that is used when present,
    so only interpreted kernels pay for ``inspect.getsource``.
    """
    if fn.__name__ == "<lambda>":
        return _lambda_nodes(fn)
    source = getattr(obj, "src", None)
    if not isinstance(source, str):
        source = inspect.getsource(fn)
    tree = ast.parse(textwrap.dedent(source))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fn.__name__:
            body = node.body
            first = body[0].value if body and isinstance(body[0], ast.Expr) else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and len(body) > 1:
                node.body = body[1:]  # the docstring is not code
            # neither are the decorators: the values their arguments read (a flag for
            # use_isolated_process, a timeout) are the tuner's settings, hashed as such or not at all
            node.decorator_list = []
            return node  # type: ignore[return-value]
    raise ValueError(f"cannot find the source of {fn.__qualname__}")


def _lambda_nodes(fn: Any) -> ast.AST:
    """The lambdas written on the line where the lambda ``fn`` starts, from its module's parsed source:
    its code does not say which of them it is, and the text of those lines alone may not parse (a
    lambda inside a dict literal)."""
    lines, _ = inspect.findsource(fn)
    line = fn.__code__.co_firstlineno
    found = [n for n in _lambdas("".join(lines)) if n.lineno == line]
    if not found:
        raise ValueError(f"cannot find the source of the lambda on line {line}")
    return ast.Tuple(elts=sorted(found, key=lambda n: n.col_offset), ctx=ast.Load())


@functools.lru_cache(maxsize=16)
def _lambdas(module_source: str) -> tuple[ast.Lambda, ...]:
    """The lambdas of a module's source, parsed once for all the heuristics written there."""
    return tuple(n for n in ast.walk(ast.parse(module_source)) if isinstance(n, ast.Lambda))


def _names(node: ast.AST) -> tuple[list[tuple[str, ...]], set[str]]:
    """In one pass over the function: the dotted names it reads, e.g. ('helper',), ('mod', 'CONST'),
    and the names that are local to it (arguments and assignment targets)."""
    chains: list[tuple[str, ...]] = []
    local: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            parts: list[str] = [sub.attr]
            base: ast.AST = sub.value
            while isinstance(base, ast.Attribute):
                parts.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name):
                chains.append((base.id, *reversed(parts)))
        elif isinstance(sub, ast.Name):
            if isinstance(sub.ctx, ast.Load):
                chains.append((sub.id,))
            else:
                local.add(sub.id)
        elif isinstance(sub, ast.arg):
            local.add(sub.arg)
    return chains, local


def _scope(fn: Any) -> dict[str, Any]:
    scope = dict(fn.__globals__)
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                scope[name] = cell.cell_contents
            except ValueError:  # empty cell
                continue
    return scope


def _resolve(chain: tuple[str, ...], scope: dict[str, Any]) -> Any:
    if chain[0] not in scope:
        return None
    value = scope[chain[0]]
    for attr in chain[1:]:
        if inspect.ismodule(value) and value.__name__.split(".")[0] == "triton":
            return None  # triton.language builtins are covered by the Triton version
        value = getattr(value, attr, None)
        if value is None:
            return None
    return value


def _is_module_or_builtin(value: Any) -> bool:
    return inspect.ismodule(value) or inspect.isbuiltin(value) or inspect.isclass(value)


def _plain_value(value: Any) -> Any:
    """The JSON-able form of a global constant a kernel may read, or None if it is not one."""
    try:
        return encode_value(_compat.constexpr_value(value))
    except EncodingError:
        return None


def code_version(kernel: Any) -> str:
    """Hash of the kernel's code and of everything its compiled code depends on in Python.

    It covers the function's source as an AST (so line numbers, decorators, comments, docstrings
    and formatting do not matter), the ``@jit`` arguments that change the compiled code
    (``do_not_specialize``, ``do_not_specialize_on_alignment``, ``noinline``, ``debug``), the @jit
    functions it calls (recursively, with the methods of the ``@triton.aggregate`` classes it uses),
    the constexpr or scalar globals and closure values it reads, and the functions of the
    ``@triton.heuristics`` under the tuner (the meta-parameters they set are compiled in), with the
    plain Python functions of their own package that they (or a ``constexpr_function``) call. Names
    that resolve to triton itself are covered by the Triton version in the storage path.
    """
    description = _describe_function(kernel, {})
    heuristics = _compat.heuristics_under(kernel)
    if heuristics:  # only when there are, so that the identity of a kernel without them is unchanged
        description = {
            "kernel": description,
            "heuristics": [{name: _describe_heuristic(f) for name, f in h.items()} for h in heuristics],
        }
    return stable_hash(description)


def _describe_heuristic(fn: Any) -> Any:
    """A heuristic's function as a kernel's (its code, the plain values and @jit functions it reads); a
    callable without source (a ``functools.partial``, code made by ``exec``) by its name."""
    if inspect.isfunction(fn):
        try:
            return _describe_function(fn, {})
        except (OSError, TypeError, ValueError, SyntaxError):
            pass
    return {"name": callable_name(fn)}


def _describe_function(obj: Any, seen: dict[Any, str]) -> Any:
    fn = _compat.python_function(obj)
    if fn in seen:
        return {"recursive": fn.__qualname__}
    seen[fn] = fn.__qualname__
    node = _function_node(obj, fn)
    scope = _scope(fn)
    chains, local_names = _names(node)
    dependencies: dict[str, Any] = {}
    for chain in chains:
        if chain[0] in local_names:
            continue
        dotted = ".".join(chain)
        if dotted in dependencies:
            continue
        value = _resolve(chain, scope)
        if value is None:
            continue
        target = _compat.constexpr_value(value)  # a constexpr global may hold a @jit function
        if _compat.is_jit_callable(target):
            dependencies[dotted] = {"jit": _describe_function(target, seen)}
            continue
        aggregate = _compat.aggregate_parts(target)
        if aggregate is not None:
            dependencies[dotted] = {"aggregate": _describe_aggregate(*aggregate, seen)}
            continue
        if not _compat.is_constexpr(value) and (_is_module_or_builtin(value) or callable(value)):
            helper = _own_helper(value, fn)
            if helper is not None:
                dependencies[dotted] = {"python": _describe_helper(helper, seen)}
            continue
        plain = _plain_value(value)
        if plain is not None:
            dependencies[dotted] = {"value": plain}
    description = {"name": fn.__name__, "ast": short_hash(_canonical_ast(node)), "deps": dependencies}
    options = _compat.jit_options(obj)
    if options:  # only when given, so that the identity of a function without them is unchanged
        description["jit"] = options
    return description


def _top_module(fn: Any) -> str:
    return str(getattr(fn, "__module__", None) or "").partition(".")[0]


def _own_helper(value: Any, fn: Any) -> Any:
    """The plain Python function ``value`` (under ``functools`` wrappers such as ``lru_cache``) when
    it is written in the package of ``fn``, whose code it runs (a heuristic's or a
    ``constexpr_function``'s helper), else None: a library's functions (torch, numpy, the standard
    library) are not the user's code, and Triton's are covered by its version."""
    try:
        target = inspect.unwrap(value)
    except ValueError:  # a cycle of __wrapped__
        return None
    if not inspect.isfunction(target) or _top_module(target) != _top_module(fn):
        return None
    return target


def _describe_helper(fn: Any, seen: dict[Any, str]) -> Any:
    """A Python helper as a kernel's function (its code and what it reads); by its name when its
    source cannot be read."""
    try:
        return _describe_function(fn, seen)
    except (OSError, TypeError, ValueError, SyntaxError):
        return {"name": callable_name(fn)}


def _describe_aggregate(fields: dict[str, Any], members: list[Any], seen: dict[Any, str]) -> Any:
    """A ``@triton.aggregate`` class: its fields' types by name and the code of its methods (Triton's
    own, such as a generated ``__init__``, are covered by the Triton version)."""
    methods = {}
    for member in members:
        function = getattr(member, "__func__", member)
        if getattr(function, "__triton_builtin__", False):
            continue
        if _compat.is_jit_callable(function) or inspect.isfunction(function):
            methods[function.__name__] = _describe_function(function, seen)
    types = {name: t if isinstance(t, str) else callable_name(t) for name, t in fields.items()}
    return {"fields": types, "methods": methods}


def callable_name(fn: Any) -> str | None:
    """A stable name for a user callable: ``module.qualname`` (never its repr or id). A
    ``functools.partial`` is named by the function it wraps and the values it binds (every partial's
    own name is ``functools.partial``: two timing functions would be one)."""
    if fn is None:
        return None
    if isinstance(fn, functools.partial):
        bound = [_bound_text(a) for a in fn.args]
        bound += [f"{name}={_bound_text(value)}" for name, value in sorted(fn.keywords.items())]
        return f"functools.partial({', '.join([str(callable_name(fn.func)), *bound])})"
    target = getattr(fn, "__func__", fn)
    module = getattr(target, "__module__", None) or type(target).__module__
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}.{qualname}"


def _bound_text(value: Any) -> str:
    """A value a ``functools.partial`` binds, as :func:`callable_name` shows it: plain data as JSON, a
    callable by its name, anything else by its type (never an id)."""
    plain = _plain_value(value)
    if plain is not None or value is None:
        return canonical_json(plain)
    if callable(value):
        return str(callable_name(value))
    return f"<{type(value).__module__}.{type(value).__qualname__}>"
