"""Numerical check: rule out tuning candidates whose outputs differ from a reference's.

A config can be fast because it is wrong (a tile size that breaks masking, a race in a split
reduction). With the check on, every candidate first runs once from the call's original inputs; the
tensors it writes are compared with the reference's, and a mismatching candidate is ruled out
before it is timed. The reference is a user-given ``reference_fn`` or, without one, the first
candidate that runs (put a trusted config first).

Outputs are the tensor arguments named in ``check_outputs``, or, without them, the tensor arguments
whose contents the reference run changed. Every tensor argument is restored to its original
contents before each checked run, so in-place kernels are compared on the same inputs.

:class:`CheckedEvaluator` wraps any evaluator that launches kernels in the current process: the
in-process evaluator, and the one inside an isolated worker (see :mod:`.isolation`).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _compat, _env
from .._compat import Config
from .._log import DejavuConfigWarning, warn_once
from ..store.identity import callable_name
from .evaluate import Evaluator
from .launch import Failure, make_kernel_call

log = logging.getLogger(__name__)

#: Default tolerances by output dtype: (rtol, atol as a fraction of the reference's largest magnitude).
#: 16-bit types allow about two units in the last place (their results are rounded from fp32
#: accumulators); fp32 and fp64 allow for reductions summed in another order.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-5),
    "float16": (2e-3, 1e-3),
    "bfloat16": (1.6e-2, 8e-3),
}


class NumericalMismatch(Exception):
    """A candidate's outputs differ from the reference's beyond the tolerances."""


@dataclass(frozen=True)
class NumericalCheck:
    """What the check compares and how strictly (the tuner's settings, not per-run state).

    ``enabled``: True/False force the check on/off; None turns it on when
    ``TRITON_DEJAVU_NUMERICAL_CHECK=1`` or when any other field is given. ``reference_fn`` is called
    with the kernel's arguments by name (as passed to the launch, without ``grid``, ``warmup`` and
    tuned meta-parameters) and either writes the expected outputs into them and returns None, or
    returns ``{argument name: expected tensor}``. ``rtol``/``atol`` replace the dtype defaults
    (``atol`` is then absolute).
    """

    enabled: bool | None = None
    reference_fn: Callable[..., Any] | None = None
    outputs: tuple[str, ...] | None = None
    rtol: float | None = None
    atol: float | None = None

    def __post_init__(self) -> None:
        if self.reference_fn is not None and not callable(self.reference_fn):
            raise TypeError("reference_fn must be callable")
        if isinstance(self.outputs, str):
            raise TypeError(
                f"check_outputs must be a list of argument names, not the string {self.outputs!r}"
            )
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"check_{name} must be >= 0, got {value!r}")

    def active(self) -> bool:
        if self.enabled is not None:
            return bool(self.enabled)
        configured = (self.reference_fn, self.outputs, self.rtol, self.atol)
        return _env.numerical_check() or any(v is not None for v in configured)

    def settings(self) -> dict[str, Any]:
        """What of the check changes decisions (JSON-able; callables by qualified name)."""
        return {
            "reference": callable_name(self.reference_fn) or "first valid candidate",
            "outputs": list(self.outputs) if self.outputs is not None else None,
            "rtol": self.rtol,
            "atol": self.atol,
        }


# --- comparing ------------------------------------------------------------------------------------


def tolerance(
    dtype: Any, scale: float, rtol: float | None = None, atol: float | None = None
) -> tuple[float, float]:
    """(rtol, atol) for outputs of ``dtype`` whose reference has largest magnitude ``scale``.

    Integer and boolean outputs must match exactly unless tolerances are given. Floating types
    outside :data:`DEFAULT_TOLERANCES` (fp8 and others) allow two units in the last place.
    """
    import torch

    if not (dtype.is_floating_point or dtype.is_complex):
        default = (0.0, 0.0)
    else:
        real = dtype.to_real() if dtype.is_complex else dtype
        eps = torch.finfo(real).eps
        default = DEFAULT_TOLERANCES.get(str(real).removeprefix("torch."), (2 * eps, eps))
    return (
        default[0] if rtol is None else float(rtol),
        default[1] * scale if atol is None else float(atol),
    )


def compare(
    name: str, actual: Any, expected: Any, *, rtol: float | None = None, atol: float | None = None
) -> str | None:
    """None when ``actual`` matches ``expected``; otherwise a one-line description of the mismatch.

    An element matches when ``|actual - expected| <= atol + rtol * |expected|``; NaNs match NaNs,
    infinities match infinities of the same sign.
    """
    import torch

    if tuple(actual.shape) != tuple(expected.shape):
        return f"'{name}' has shape {tuple(actual.shape)}, the reference {tuple(expected.shape)}"
    if actual.numel() == 0:
        return None
    work = _working_dtype(expected.dtype)
    a, b = actual.to(work), expected.to(work)
    magnitude = b.abs()
    finite = magnitude[torch.isfinite(magnitude)]
    scale = float(finite.max()) if finite.numel() else 0.0
    r, t = tolerance(expected.dtype, scale, rtol, atol)
    if r == t == 0 and not (expected.dtype.is_floating_point or expected.dtype.is_complex):
        ok = actual == expected  # integers and booleans: exact, in their own type
    else:
        ok = torch.isclose(a, b, rtol=r, atol=t, equal_nan=True)
    bad = int((~ok).sum())
    if not bad:
        return None
    errors = (a - b).abs()[~ok]
    err = float("nan") if bool(errors.isnan().any()) else float(errors.max())
    return (
        f"'{name}': {bad} of {actual.numel()} elements differ, max abs err {err:.3g} "
        f"(rtol {r:.2g}, atol {t:.3g})"
    )


def _working_dtype(dtype: Any) -> Any:
    """Where differences are computed: float64 for 64-bit types and 32-bit integers (exact for
    integers below 2**53; float32 is exact only below 2**24), else float32."""
    import torch

    if dtype.is_complex:
        return torch.complex128 if dtype == torch.complex128 else torch.complex64
    wide = dtype.itemsize == 8 or (not dtype.is_floating_point and dtype.itemsize == 4)
    return torch.float64 if wide else torch.float32


# --- the tensor arguments of a call ---------------------------------------------------------------


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
        import torch

        self.tensors = {n: _alias(v) for n, v in arguments.items() if isinstance(v, torch.Tensor)}
        self._saved = {n: t.clone() for n, t in self.tensors.items() if _writable(t)}

    def restore(self) -> None:
        """Put the original contents back (every tensor argument, inputs and outputs alike)."""
        for name, saved in self._saved.items():
            self.tensors[name].copy_(saved)

    def changed(self) -> list[str]:
        """Names of the tensor arguments whose contents differ (bitwise) from the original."""
        import torch

        return [
            n for n, saved in self._saved.items() if not torch.equal(_bits(self.tensors[n]), _bits(saved))
        ]

    def capture(self, names: Sequence[str]) -> dict[str, Any]:
        return {n: self.tensors[n].clone() for n in names}


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


# --- the evaluator ----------------------------------------------------------------------------------


class CheckedEvaluator(Evaluator):
    """Checks each candidate's outputs against the reference before ``inner`` times it.

    ``reference_config``: a candidate known to have run (a worker that replaces a crashed one
    recomputes the reference from it in :meth:`prepare`). After a :meth:`measure`, it names the
    candidate that serves as the reference.
    """

    def __init__(
        self, inner: Evaluator, check: NumericalCheck, *, reference_config: Config | None = None
    ) -> None:
        super().__init__(inner.ctx)
        self.inner = inner
        self.check = check
        self.reference_config = reference_config
        ctx = inner.ctx
        self._arguments = kernel_arguments(ctx.fn, ctx.nargs, ctx.kwargs)
        self._tensors = CallTensors(self._arguments)
        self._outputs: tuple[str, ...] | None = None
        if check.outputs is not None:
            missing = [n for n in check.outputs if n not in self._tensors.tensors]
            if missing:
                raise ValueError(
                    f"{ctx.kernel_name}: check_outputs names {', '.join(map(repr, missing))}, "
                    "which are not tensor arguments of this call"
                )
            self._outputs = tuple(check.outputs)
        self._expected: dict[str, Any] | None = None

    def prepare(self, configs: Sequence[Config]) -> dict[Config, Failure]:
        ruled_out = self.inner.prepare(configs)
        self._ensure_reference()
        return ruled_out

    def measure(self, config: Config) -> list[float]:
        self._ensure_reference()
        outputs = self._run(config)
        becomes_reference = self._expected is None and bool(outputs)
        if becomes_reference:
            self._expected, self.reference_config = outputs, config
        elif self._expected is not None:
            for name, expected in self._expected.items():
                reason = compare(name, outputs[name], expected, rtol=self.check.rtol, atol=self.check.atol)
                if reason is not None:
                    raise NumericalMismatch(reason)
        try:
            return self.inner.measure(config)
        except BaseException:
            if becomes_reference:  # a reference must be a candidate that runs
                self._expected, self.reference_config = None, None
            raise

    def refine(self, configs: Sequence[Config]) -> dict[Config, list[float]] | None:
        return self.inner.refine(configs)

    def close(self) -> None:
        try:
            self._tensors.restore()
        finally:
            self.inner.close()

    # --- runs -------------------------------------------------------------------------------------

    def _ensure_reference(self) -> None:
        """Compute the expected outputs from ``reference_fn`` or a known reference config, once."""
        if self._expected is not None:
            return
        if self.check.reference_fn is not None:
            self._expected = self._run_reference_fn()
        elif self.reference_config is not None:
            self._expected = self._run(self.reference_config)

    def _run(self, config: Config) -> dict[str, Any]:
        """One launch of ``config`` from the original inputs; the outputs it wrote, copied.

        The copy is taken before the tuner's ``post_hook`` (which may restore ``restore_value``
        arguments) and after its ``pre_hook`` (``reset_to_zero``), as the kernel left them.
        """
        self._tensors.restore()
        captured: dict[str, Any] = {}
        post_hook = self.ctx.post_hook

        def capture_then_post_hook(nargs: dict[str, Any], exception: BaseException | None = None) -> None:
            if exception is None:
                captured.update(self._tensors.capture(self._output_names()))
            post_hook(nargs, exception=exception)

        make_kernel_call(dataclasses.replace(self.ctx, post_hook=capture_then_post_hook), config)()
        return captured

    def _output_names(self) -> Sequence[str]:
        if self._outputs is not None:
            return self._outputs
        names = self._tensors.changed()
        if names:
            self._outputs = tuple(names)
            log.debug("%s: numerical check compares %s", self.ctx.kernel_name, ", ".join(names))
        else:
            warn_once(
                DejavuConfigWarning,
                self.ctx.kernel_name,
                "%s: the numerical check found no tensor argument that the kernel writes; "
                "declare them with check_outputs",
                self.ctx.kernel_name,
            )
        return names

    def _run_reference_fn(self) -> dict[str, Any]:
        import torch

        assert self.check.reference_fn is not None
        self._tensors.restore()
        result = self.check.reference_fn(**self._arguments)
        if result is None:
            expected = self._tensors.capture(self._output_names())
        elif isinstance(result, Mapping):
            expected = {}
            for name, value in result.items():
                target = self._tensors.tensors.get(name)
                if target is None or not isinstance(value, torch.Tensor):
                    raise TypeError(
                        f"reference_fn returned {name!r}: the keys must name tensor arguments and the "
                        "values be tensors"
                    )
                expected[name] = value.detach().to(device=target.device, dtype=target.dtype)
            if self._outputs is None:
                self._outputs = tuple(expected)
            expected = {n: expected[n] for n in self._outputs if n in expected}
        else:
            raise TypeError(
                f"reference_fn must return None or a mapping of argument names to tensors, "
                f"not {type(result).__name__}"
            )
        self._tensors.restore()
        return expected
