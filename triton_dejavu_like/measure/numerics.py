"""Numerical check: rule out tuning candidates whose outputs differ from a reference's.

A config can be fast because it is wrong (a tile size that breaks masking, a race in a split
reduction). With the check on, every candidate first runs once from the call's original inputs; the
tensors it writes are compared with the reference's, and a mismatching candidate is ruled out
before it is timed. The reference is a user-given ``reference_fn`` or, without one, the first of the
first configs of the list that runs and writes one of the outputs, run untimed before the search
(:meth:`CheckedEvaluator.adopt_reference`, called by the tuning run; put a trusted config first), so
that neither the search's order nor a rank's share of the candidates changes it. Failing that, the
first candidate measured that writes one of them. A candidate that writes none of them while there is
no reference yet is timed, and judged once a later candidate becomes the reference
(:meth:`CheckedEvaluator.late_rule_outs`): leaving the outputs as they were matches that reference
or rules it out.

Outputs are the tensor arguments named in ``check_outputs``, or, without them, the tensor arguments
whose contents the reference run changed; a tensor descriptor argument (``TensorDescriptor``: a
dataclass that holds one tensor) stands for the tensor it describes, which the kernel writes through
it. Every tensor argument is restored to its original contents before each checked run, so in-place
kernels are compared on the same inputs; what a run changed is judged against where its launch
started, after the tuner's ``pre_hook`` (zeros that ``reset_to_zero`` put into an output are not the
candidate's writes).

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
from .launch import Failure, LaunchRecord, TuningStopped, make_kernel_call, stops_tuning, user_call

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
    tuned meta-parameters), after the tuner's ``pre_hook`` reset them as before each candidate's
    launch, and either writes the expected outputs into them and returns None, or returns
    ``{argument name: expected tensor}``. ``rtol``/``atol`` replace the dtype defaults
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

    def configured(self) -> bool:
        """Whether the kernel's own arguments turn the check on: what the storage identity holds.
        ``TRITON_DEJAVU_NUMERICAL_CHECK=1`` alone does not, so that setting it while tuning ahead
        of time does not move where results are stored (a serving process without it restores them)."""
        if self.enabled is not None:
            return bool(self.enabled)
        return any(v is not None for v in (self.reference_fn, self.outputs, self.rtol, self.atol))

    def unused(self) -> list[str]:
        """The check's arguments given while ``numerical_check=False`` turns it off (they have no effect)."""
        if self.enabled is not False:
            return []
        given = (("reference_fn", self.reference_fn), ("check_outputs", self.outputs))
        given += (("check_rtol", self.rtol), ("check_atol", self.atol))
        return [name for name, value in given if value is not None]

    def active(self) -> bool:
        """Whether tuning runs check candidates: :meth:`configured`, or the variable when
        ``enabled`` is None."""
        return self.configured() or (self.enabled is None and _env.numerical_check())

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


# --- candidates timed before there was a reference ------------------------------------------------


def rule_out_unwritten(
    kernel_name: str,
    declared: Sequence[str] | None,
    unchecked: Sequence[Config],
    *,
    reference: bool,
    mismatch: str | None,
) -> dict[Config, str]:
    """The verdict, once the search is over, on the candidates timed while there was no reference
    (each wrote none of the outputs): with a reference (a later candidate wrote), ``mismatch`` (why
    leaving the outputs unwritten does not match it, or None) rules them all out; without one, no
    candidate wrote anything, the check compared nothing, and the user is told."""
    if not unchecked:
        return {}
    if not reference:
        _warn_nothing_written(kernel_name, declared)
        return {}
    return dict.fromkeys(unchecked, mismatch) if mismatch is not None else {}


def _warn_nothing_written(kernel_name: str, declared: Sequence[str] | None) -> None:
    if declared is None:
        message = "found no tensor argument that the kernel writes; declare them with check_outputs"
    else:
        message = f"compared nothing: no candidate changed check_outputs ({', '.join(declared)})"
    warn_once(DejavuConfigWarning, kernel_name, "%s: the numerical check %s", kernel_name, message)


# --- the evaluator ----------------------------------------------------------------------------------


class CheckedEvaluator(Evaluator):
    """Checks each candidate's outputs against the reference before ``inner`` times it.

    ``reference_config``: a candidate known to have run (a worker that replaces a crashed one
    recomputes the reference from it in :meth:`prepare`). After a :meth:`measure` or an
    :meth:`adopt_reference`, it names the candidate that serves as the reference, and
    :attr:`unchecked` lists the candidates timed while there was none (they wrote none of the
    outputs). ``hook_config``: the config whose values the tuner's ``pre_hook`` sees with the call's
    arguments when it resets them for ``reference_fn`` (the kernel's first: upstream's hooks always
    see a config's values).
    """

    def __init__(
        self,
        inner: Evaluator,
        check: NumericalCheck,
        *,
        reference_config: Config | None = None,
        hook_config: Config | None = None,
    ) -> None:
        super().__init__(inner.ctx)
        self.inner = inner
        self.check = check
        self.reference_config = reference_config
        self._hook_values = hook_config.all_kwargs() if hook_config is not None else {}
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
        self.unchecked: list[Config] = []

    def prepare(self, configs: Sequence[Config]) -> dict[Config, Failure]:
        ruled_out = self.inner.prepare(configs)
        self._ensure_reference()
        return ruled_out

    def measure(self, config: Config) -> list[float]:
        self._ensure_reference()
        outputs, wrote = self._run(config)
        becomes_reference = self._expected is None and wrote
        if becomes_reference:
            self._expected, self.reference_config = outputs, config
        elif self._expected is not None:
            reason = self._mismatch(outputs)
            if reason is not None:
                raise NumericalMismatch(reason)
        try:
            timings = self.inner.measure(config)
        except BaseException:
            if becomes_reference:  # a reference must be a candidate that runs
                self._expected, self.reference_config = None, None
            raise
        if self._expected is None:  # it wrote nothing, and nothing says yet whether it should have
            self.unchecked.append(config)
        return timings

    def refine(self, configs: Sequence[Config]) -> dict[Config, list[float]] | None:
        return self.inner.refine(configs)

    def adopt_reference(self, config: Config) -> bool:
        self._ensure_reference()
        if self._expected is None:
            outputs, wrote = self._run(config)
            if wrote:
                self._expected, self.reference_config = outputs, config
        return self._expected is not None

    def late_rule_outs(self) -> dict[Config, str]:
        mismatch = self.unwritten_mismatch() if self.unchecked else None
        return rule_out_unwritten(
            self.ctx.kernel_name,
            self.check.outputs,
            self.unchecked,
            reference=self._expected is not None,
            mismatch=mismatch,
        )

    def unwritten_mismatch(self) -> str | None:
        """Why a candidate that wrote none of the outputs does not match the reference, as a reason
        for ruling it out; None when it matches or when there is no reference."""
        if self._expected is None:
            return None
        reason = self._mismatch(self._tensors.start(list(self._expected)))
        if reason is None:
            return None
        return f"{NumericalMismatch.__name__}: it wrote none of the outputs; {reason}"

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
            self._expected = self._run(self.reference_config)[0]

    def _run(self, config: Config) -> tuple[dict[str, Any], bool]:
        """One launch of ``config`` from the original inputs: the outputs it wrote, copied, and (while
        there is no reference) whether it changed any of them from where the launch started, after
        the hooks before it.

        The copy is taken before the tuner's ``post_hook`` (which may restore ``restore_value``
        arguments) and after its ``pre_hook`` (``reset_to_zero``), as the kernel left them.
        """
        self._tensors.restore()
        captured: dict[str, Any] = {}
        wrote = False
        pre_hook, post_hook = self.ctx.pre_hook, self.ctx.post_hook

        def pre_hook_then_mark_start(nargs: dict[str, Any], **options: Any) -> None:
            pre_hook(nargs, **options)
            if self._expected is None:
                self._tensors.mark_start()

        def capture_then_post_hook(nargs: dict[str, Any], exception: BaseException | None = None) -> None:
            nonlocal wrote
            if exception is None:
                if self._expected is None:
                    wrote = bool(self._written())
                captured.update(self._tensors.capture(self._outputs or ()))
            post_hook(nargs, exception=exception)

        hooks = {"pre_hook": pre_hook_then_mark_start, "post_hook": capture_then_post_hook}
        record = LaunchRecord()
        with stops_tuning([record]):
            make_kernel_call(dataclasses.replace(self.ctx, **hooks), config, record)()
        return captured, wrote

    def _written(self) -> list[str]:
        """The outputs whose contents the run changed; without declared outputs, the first run that
        changes any tensor argument decides which are the outputs."""
        written = self._tensors.changed(self._outputs)
        if written and self._outputs is None:
            self._outputs = tuple(written)
            log.debug("%s: numerical check compares %s", self.ctx.kernel_name, ", ".join(written))
        return written

    def _mismatch(self, outputs: Mapping[str, Any]) -> str | None:
        """Why ``outputs`` differ from the reference's (the first output that does), or None."""
        assert self._expected is not None
        for name, expected in self._expected.items():
            reason = compare(name, outputs[name], expected, rtol=self.check.rtol, atol=self.check.atol)
            if reason is not None:
                return reason
        return None

    def _run_reference_fn(self) -> dict[str, Any]:
        """``reference_fn``'s outputs, from where every candidate's launch starts: the original
        contents, then the tuner's ``pre_hook`` (``reset_to_zero``). The hook is called with
        ``reset_only=True``, as upstream calls it before the launch that follows tuning: it resets and
        takes no ``restore_value`` copies, which no ``post_hook`` would put back."""
        import torch

        assert self.check.reference_fn is not None
        self._tensors.restore()
        user_call("pre_hook", self.ctx.pre_hook, self.ctx.hook_args(self._hook_values), reset_only=True)
        self._tensors.mark_start()
        result = user_call("reference_fn", self.check.reference_fn, **self._arguments)
        if result is None:
            if not self._written() and self._outputs is None:
                _warn_nothing_written(self.ctx.kernel_name, None)
            expected = self._tensors.capture(self._outputs or ())
        elif isinstance(result, Mapping):
            expected = {}
            for name, value in result.items():
                target = self._tensors.tensors.get(name)
                # the reference's own errors end tuning: every candidate would fail alike
                if target is None or not isinstance(value, torch.Tensor):
                    raise TuningStopped(
                        "reference_fn",
                        TypeError(
                            f"reference_fn returned {name!r}: the keys must name tensor arguments and "
                            "the values be tensors"
                        ),
                    )
                if value.shape != target.shape:
                    raise TuningStopped(
                        "reference_fn",
                        ValueError(
                            f"reference_fn returned {name!r} of shape {tuple(value.shape)}, the argument "
                            f"has shape {tuple(target.shape)}"
                        ),
                    )
                # a copy: the tensor returned may be the argument it wrote (or a view of it), which
                # each candidate's launch overwrites, so that each would match itself
                expected[name] = value.detach().to(device=target.device, dtype=target.dtype, copy=True)
            if self._outputs is None:
                self._outputs = tuple(expected)
            expected = {n: expected[n] for n in self._outputs if n in expected}
        else:
            raise TuningStopped(
                "reference_fn",
                TypeError(
                    f"reference_fn must return None or a mapping of argument names to tensors, "
                    f"not {type(result).__name__}"
                ),
            )
        self._tensors.restore()
        return expected
