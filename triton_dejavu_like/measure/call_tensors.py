"""The tensor arguments of a kernel call, for the numerical check: found by name (a tensor, or the
one tensor a descriptor holds), saved, restored before each checked run, and what a launch changed."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _compat


def _bits(tensor: Any) -> Any:
    """The tensor's memory as integers of the same width (bitwise comparison, NaN == NaN)."""
    import torch

    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    return tensor.view(
        {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    )


class CallTensors:
    """The tensor arguments of a kernel call by name, with a copy of their original contents.

    Each is held as an :func:`_alias`, so restoring works on tensors that require grad (an
    ``nn.Parameter``) and leaves the caller's tensors' autograd version counters alone.
    """

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        tensors = {n: tensor_of(v) for n, v in arguments.items()}
        self.tensors = {n: _alias(t) for n, t in tensors.items() if t is not None}
        self._saved = {n: t.clone() for n, t in self.tensors.items() if _writable(t)}
        self._start = self._saved

    def restore(self) -> None:
        """Put the original contents back (every tensor argument, inputs and outputs alike)."""
        for name, saved in self._saved.items():
            self.tensors[name].copy_(saved)

    def mark_start(self) -> None:
        """Take the current contents as where a launch starts: the originals, some of them reset by
        the tuner's ``pre_hook`` (``reset_to_zero``). :meth:`changed` and :meth:`start` refer to it."""
        self._start = {**self._saved, **self.capture(self._differing(self._saved))}

    def changed(self, names: Sequence[str] | None = None) -> list[str]:
        """Of ``names`` (default: every tensor argument), those whose contents differ (bitwise) from
        where the launch started."""
        return self._differing(self._start, names)

    def _differing(self, contents: Mapping[str, Any], names: Sequence[str] | None = None) -> list[str]:
        import torch

        names = contents if names is None else [n for n in names if n in contents]
        return [n for n in names if not torch.equal(_bits(self.tensors[n]), _bits(contents[n]))]

    def capture(self, names: Sequence[str]) -> dict[str, Any]:
        return {n: self.tensors[n].clone() for n in names}

    def start(self, names: Sequence[str]) -> dict[str, Any]:
        """The contents of ``names`` where a launch starts: what a launch that writes none of them
        leaves there."""
        return {n: self._start.get(n, self.tensors[n]) for n in names}


def tensor_of(value: Any) -> Any:
    """The tensor an argument stands for: a tensor itself, or the one tensor a dataclass argument holds
    (a host-side ``TensorDescriptor``: what the kernel writes through it is its base tensor); else None."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        held = [getattr(value, f.name) for f in dataclasses.fields(value)]
        tensors = [v for v in held if isinstance(v, torch.Tensor)]
        if len(tensors) == 1:
            return tensors[0]
    return None


def _alias(tensor: Any) -> Any:
    """A tensor over the same memory as ``tensor`` that autograd does not track: writing it is allowed
    where writing ``tensor`` is not (a leaf that requires grad), and, like a kernel's own writes, does
    not invalidate what autograd saved of ``tensor`` (the alias has a version counter of its own)."""
    import torch

    alias = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    return alias.set_(tensor.untyped_storage(), tensor.storage_offset(), tensor.size(), tensor.stride())


def _writable(tensor: Any) -> bool:
    """Whether a kernel may write the tensor: not empty and not broadcast (no stride-0 dimension)."""
    if tensor.numel() == 0:
        return False
    return all(stride != 0 or size == 1 for size, stride in zip(tensor.shape, tensor.stride()))


def kernel_arguments(fn: Any, nargs: Mapping[str, Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of a launch by name: positional ones, and keyword ones that name a parameter."""
    parameters = inspect.signature(_compat.python_function(fn)).parameters
    return {**nargs, **{k: v for k, v in kwargs.items() if k in parameters}}
