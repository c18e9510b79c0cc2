"""What a compile worker needs to know of the call being tuned: the kernel (a token for forked
workers, else where to import it from) and stand-ins for its arguments (tensors of the same dtype and
alignment, every other value as it is)."""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass
from typing import Any

from .. import _compat
from .isolation.settings import IsolationError
from .isolation.transfer import KernelRef
from .launch import LaunchContext
from .recipe import KernelRecipe

#: How one argument travels to a compile worker: a tensor stand-in (dtype name, 16-byte aligned?)
#: or a plain value.
ArgSpec = tuple[str, Any]


class Unsupported(Exception):
    """This call cannot be compiled in a worker process (the tuner compiles in threads instead)."""


def _arg_spec(value: Any) -> ArgSpec:
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", (str(value.dtype).removeprefix("torch."), value.data_ptr() % 16 == 0))
    if value is None or isinstance(value, (bool, int, float, str)):
        return ("value", value)
    if _compat.is_constexpr(value):
        return ("value", _compat.constexpr_value(value))
    raise Unsupported(f"an argument of type {type(value).__name__} cannot be sent to a compile worker")


def stand_in(spec: ArgSpec, device: int | None) -> Any:
    """The argument a worker compiles with: a 2-element tensor of the dtype and alignment (on the
    CPU in a forked worker: compiling reads only its dtype and address), or the value itself."""
    import torch

    kind, payload = spec
    if kind == "value":
        return payload
    dtype_name, aligned = payload
    dtype = getattr(torch, dtype_name)
    base = torch.empty(2, dtype=dtype, device="cpu" if device is None else f"cuda:{device}")
    return base if aligned else base[1:]


#: The kernels (``JITFunction``) forked workers know, by token: a worker forked after a kernel was
#: registered finds it in its copy of this dict, without importing anything.
#: Held weakly: a kernel deleted (one made by a function, say) is not kept for the life of the process.
forked_kernels: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_tokens = itertools.count()  # a token is never reused: a worker forked earlier knows it as another kernel


def token_of(fn: Any) -> int:
    """The token of ``fn`` in :data:`forked_kernels` (registered on first use; kept while ``fn`` lives)."""
    for token, known in list(forked_kernels.items()):
        if known is fn:
            return token
    token = next(_tokens)
    forked_kernels[token] = fn
    return token


@dataclass(frozen=True)
class CallSpec:
    """What a worker needs to compile candidates for one call: the kernel (a token of
    :data:`forked_kernels` for forked workers, else where to import it from) and argument
    stand-ins."""

    kernel: int | KernelRef
    args: tuple[ArgSpec, ...]
    meta: tuple[tuple[str, ArgSpec], ...]  # the call's keywords other than grid and warmup

    @classmethod
    def of(cls, recipe: KernelRecipe, ctx: LaunchContext, *, forked: bool) -> CallSpec:
        kernel: int | KernelRef
        if forked:
            kernel = token_of(recipe.fn)
        else:
            try:
                kernel = KernelRef.of(recipe)
            except IsolationError as exc:
                raise Unsupported(str(exc)) from exc
        meta = tuple((k, _arg_spec(v)) for k, v in sorted(ctx.kwargs.items()) if k not in ("grid", "warmup"))
        return cls(kernel, tuple(_arg_spec(a) for a in ctx.args), meta)
