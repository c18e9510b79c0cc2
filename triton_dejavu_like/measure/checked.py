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
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from .._compat import Config
from .._log import DejavuConfigWarning, warn_once
from .call_tensors import CallTensors, kernel_arguments
from .evaluate import Evaluator
from .launch import Failure, LaunchRecord, TuningStopped, make_kernel_call, stops_tuning, user_call
from .numerics import NumericalCheck, NumericalMismatch, compare

log = logging.getLogger(__name__)

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
