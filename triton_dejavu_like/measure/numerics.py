"""The numerical check's settings and how outputs are compared with the reference's.

What the check does during tuning is in :mod:`.checked` (:class:`.checked.CheckedEvaluator`); the
tensor arguments it saves, restores and compares are held by :mod:`.call_tensors`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import _env
from ..store.identity import callable_name

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
