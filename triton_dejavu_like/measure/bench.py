"""Benchmarkers: how candidates are timed in one process.

A benchmarker is called like upstream's ``do_bench``: ``benchmarker(kernel_call, quantiles)`` returns
the times (ms) at those quantiles. On a GPU with the default settings it works in two stages: the
call is a short *screen* (a few L2-flushed launches), and :meth:`Benchmarker.refine` re-measures the
few best candidates carefully (more launches, L2 flushed before each, candidates interleaved round
by round so clock drift hits them all alike). A user-given ``do_bench`` is always honoured and used
as the only stage; under the interpreter a CPU timer is the only stage.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import random
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

from .. import _compat
from .gate import CAPACITY as GATE_CAPACITY
from .gate import StreamGate, chunked, compile_kernel, give_up, make_gate, needs_compile

#: Upstream's quantiles: median, 20th and 80th percentile.
QUANTILES: tuple[float, float, float] = (0.5, 0.2, 0.8)

KernelCall = Callable[[], Any]
DoBench = Callable[..., Any]
#: Starts a compile job (a function that compiles without launching) beside the candidates' compiles;
#: returns its future, or None when the job is done when the candidates' compiles are.
SubmitCompile = Callable[[Callable[[], Any]], "Future[None] | None"]

#: How long the first timing waits for a kernel of ours compiled ahead (then it compiles it itself).
AHEAD_WAIT_S = 60.0


def quantiles_of(samples: Sequence[float], quantiles: Sequence[float]) -> list[float]:
    """Linear-interpolated quantiles, as ``torch.quantile`` computes them."""
    ordered = sorted(samples)
    n = len(ordered)
    out = []
    for q in quantiles:
        pos = q * (n - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        out.append(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))
    return out


def round_orders(n_calls: int, rounds: int, rng: random.Random) -> list[list[int]]:
    """The order of the calls in each interleaved round: every call once per round, shuffled.

    A fixed order lets a launch's position in the round bias its time: on an H100, four configs of a
    13 us matmul timed in a fixed order came out 3-4% apart by position (the same four in reverse
    order reversed the verdict), where shuffled rounds, one config at a time and CUDA graphs agreed
    within 1-2% (``benchmarks/README.md``, 2026-11-25). Shuffled, the position adds noise to every
    finalist alike instead of a bias to some."""
    orders = []
    for _ in range(rounds):
        order = list(range(n_calls))
        rng.shuffle(order)
        orders.append(order)
    return orders


#: Timed launches per gated chunk (a careful round of more finalists is one chunk).
CHUNK_LAUNCHES = 8
_UNSET = object()

#: The careful stage checks whether the pick is settled after each of this many parts of its rounds.
REFINE_STEPS = 4
#: Two-sided normal quantile of that check's confidence (99%).
REFINE_Z = 2.576


def settled(samples: Sequence[Sequence[float]], margin: float) -> bool:
    """Whether interleaved samples (one list per finalist, one sample per round) settle the pick.

    The leader is the finalist with the best median. For every other finalist, the per-round
    ratios of its time to the leader's (paired, so drift between rounds cancels) have a
    distribution-free confidence interval for their median (order statistics ``n/2 -+ z sqrt(n)/2``,
    ``z`` being :data:`REFINE_Z`): settled when it lies above 1 (the other is slower) or within
    ``1 -+ margin`` (either pick is within ``margin`` of the other).
    """
    medians = [quantiles_of(s, (0.5,))[0] for s in samples]
    lead = samples[min(range(len(samples)), key=medians.__getitem__)]
    for other in samples:
        if other is lead:
            continue
        ratios = sorted(a / max(b, 1e-12) for a, b in zip(other, lead))
        n = len(ratios)
        if not n:
            return False
        half = REFINE_Z * math.sqrt(n) / 2
        low = ratios[max(0, math.floor(n / 2 - half))]
        high = ratios[min(n - 1, math.ceil(n / 2 + half))]
        if not (low > 1.0 or (low > 1.0 - margin and high < 1.0 + margin)):
            return False
    return True


def is_number(result: Any) -> bool:
    """Whether a do_bench result is one number (a Python or NumPy number, a 0-d array or tensor)."""
    return isinstance(result, numbers.Real) or getattr(result, "ndim", None) == 0


def normalise(result: Any, n: int) -> list[float]:
    """A do_bench result as ``n`` floats: a single number (:func:`is_number`) is repeated, a
    sequence is taken as is."""
    if is_number(result):
        return [float(result)] * n
    listed = list(result) if isinstance(result, Iterable) and not isinstance(result, (str, bytes)) else None
    if listed is None or not all(map(is_number, listed)):
        raise TypeError(
            f"do_bench returned {result!r:.60}: it must return a time in ms or a list of times "
            "(one per quantile asked)"
        )
    values = [float(v) for v in listed]
    if not values:
        raise ValueError("do_bench returned no timings")
    if len(values) < n:
        values += [values[0]] * (n - len(values))
    return values[:n]


#: The fewest and the most timed calls of :func:`cpu_do_bench`, whatever ``rep`` says.
CPU_MIN_RUNS, CPU_MAX_RUNS = 3, 100


def cpu_do_bench(
    kernel_call: KernelCall,
    quantiles: Sequence[float] = QUANTILES,
    *,
    warmup: float | None = None,
    rep: float | None = None,
) -> list[float]:
    """Wall-clock timing on the CPU (for ``TRITON_INTERPRET=1``): ``warmup``/``rep`` are milliseconds.

    One untimed call (more while ``warmup`` ms last), then timed calls until ``rep`` ms have passed,
    at least :data:`CPU_MIN_RUNS` and at most :data:`CPU_MAX_RUNS` of them.
    """
    warmup_ms = 0.0 if warmup is None else float(warmup)
    rep_ms = 20.0 if rep is None else float(rep)
    start = time.perf_counter()
    kernel_call()
    while (time.perf_counter() - start) * 1e3 < warmup_ms:
        kernel_call()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < CPU_MAX_RUNS and (len(samples) < CPU_MIN_RUNS or spent < rep_ms):
        t0 = time.perf_counter()
        kernel_call()
        elapsed = (time.perf_counter() - t0) * 1e3
        samples.append(elapsed)
        spent += elapsed
    return quantiles_of(samples, quantiles)


@dataclass(frozen=True)
class TimingPolicy:
    """How the default GPU benchmarker spends its time (all durations in milliseconds).

    ``finalists`` candidates with the best screened median are re-measured; 0 times every
    candidate in one stage with Triton's ``do_bench(warmup, rep)`` as upstream does. The careful
    stage runs up to ``final_ms`` of interleaved rounds per finalist, in quarters; after each
    quarter it ends if the pick is settled (:func:`settled`): every other finalist slower than the
    best one, or within ``final_margin`` of it, with 99% confidence. ``final_margin=0`` always runs
    the full ``final_ms``.
    """

    screen_ms: float = 10.0
    screen_max_runs: int = 100
    finalists: int = 5
    final_warmup_ms: float = 10.0
    final_ms: float = 100.0
    final_max_runs: int = 1000
    final_margin: float = 0.005

    def __post_init__(self) -> None:
        problems = [
            f"{name}={getattr(self, name)!r} must be {what}"
            for name, ok, what in (
                ("screen_ms", self.screen_ms >= 0, ">= 0"),
                ("screen_max_runs", self.screen_max_runs >= 1, ">= 1"),
                ("finalists", self.finalists >= 0, ">= 0"),
                ("final_warmup_ms", self.final_warmup_ms >= 0, ">= 0"),
                ("final_ms", self.final_ms >= 0, ">= 0"),
                ("final_max_runs", self.final_max_runs >= 1, ">= 1"),
                ("final_margin", 0 <= self.final_margin < 1, "in [0, 1)"),
            )
            if not ok
        ]
        if problems:
            raise ValueError(f"TimingPolicy: {'; '.join(problems)}")

    def settings(self) -> dict[str, Any]:
        """The fields, and how the careful stage orders its rounds (results timed with a fixed order
        were biased by position, so they are not restored as if measured this way)."""
        return {**dataclasses.asdict(self), "round_order": "shuffled"}


class Benchmarker:
    """Times candidates for one process; calling it measures one candidate."""

    #: How many of the best screened candidates :meth:`refine` re-measures (0: single stage).
    finalists: int = 0
    #: The quantiles every timing answers (the first is the one compared); set by :func:`make_benchmarker`.
    quantiles: tuple[float, ...] = QUANTILES
    #: The argument that gave the user's timing function (``do_bench``), or None for a timer of ours:
    #: an error of the user's own (not a launch's it passes on) ends tuning (see ``stops_tuning``).
    user_function: str | None = None
    #: Whether the timing function's last answer was one number (a user's ``do_bench`` may answer
    #: one): upstream's ``configs_timings`` then holds numbers (see :meth:`as_answered`). Set by the
    #: benchmarker that timed, or from an isolated worker's reply.
    answers_numbers: bool = False

    def __call__(self, kernel_call: KernelCall, quantiles: Sequence[float] = QUANTILES) -> list[float]:
        raise NotImplementedError

    def refine(self, kernel_calls: Sequence[KernelCall]) -> list[list[float]]:
        """Careful timings at :attr:`quantiles` for the finalists, in the order given."""
        return [self(call, self.quantiles) for call in kernel_calls]

    def compile_ahead(self, submit: SubmitCompile) -> None:
        """Hand ``submit`` what this benchmarker's first timing would otherwise compile in this process
        (called once the candidates' compiles start, so that the two overlap)."""

    def as_answered(self, timings: dict[Any, list[float]]) -> dict[Any, Any]:
        """``timings`` (per config, at :attr:`quantiles`) as the timing function answered them, which
        upstream's ``configs_timings`` holds: lists, except for a ``do_bench`` that answers numbers."""
        if not self.answers_numbers:
            return timings
        return {config: t[0] for config, t in timings.items()}


class UserBenchmarker(Benchmarker):
    """The user's ``do_bench(kernel_call, quantiles=...)``, for every candidate."""

    user_function = "do_bench"

    def __init__(self, do_bench: DoBench) -> None:
        self.do_bench = do_bench

    def __call__(self, kernel_call: KernelCall, quantiles: Sequence[float] = QUANTILES) -> list[float]:
        result = self.do_bench(kernel_call, quantiles=tuple(quantiles))
        self.answers_numbers = is_number(result)
        return normalise(result, len(quantiles))


class CpuBenchmarker(Benchmarker):
    """Wall-clock timing for kernels run by the interpreter."""

    def __init__(self, warmup: float | None, rep: float | None) -> None:
        self.warmup, self.rep = warmup, rep

    def __call__(self, kernel_call: KernelCall, quantiles: Sequence[float] = QUANTILES) -> list[float]:
        return cpu_do_bench(kernel_call, quantiles, warmup=self.warmup, rep=self.rep)


class GpuBenchmarker(Benchmarker):
    """CUDA/HIP event timing with the L2 flushed before every timed launch.

    With ``policy.finalists > 0`` a call is the short screen and :meth:`refine` the careful stage;
    the careful stage uses Triton's ``do_bench(warmup, rep)`` (or ``do_bench_cudagraph``) when the
    user set ``warmup``/``rep``/``use_cuda_graph``, keeping upstream's meaning of those arguments.
    Its own timings are enqueued behind stream gates (:mod:`.gate`), so that a stall of the host
    thread is not timed; ``gated = False`` times without them (for comparison).
    """

    #: Enqueue timed launches behind stream gates (made at the first timing; none where unavailable).
    gated: bool = True

    def __init__(
        self, warmup: float | None, rep: float | None, use_cuda_graph: bool, policy: TimingPolicy
    ) -> None:
        self.warmup, self.rep, self.use_cuda_graph, self.policy = warmup, rep, use_cuda_graph, policy
        self.finalists = policy.finalists
        self._flush_buffer: Any = None
        self._order_rng = random.Random(0)  # the rounds' orders: shuffled, the same in every process
        self._stream_gate: Any = _UNSET
        self._gate_compiling: Future[None] | None = None

    def _upstream(self, kernel_call: KernelCall, quantiles: Sequence[float]) -> list[float]:
        if self.use_cuda_graph:
            bench = _compat.gpu_do_bench_cudagraph()
            result = bench(
                kernel_call, rep=self.rep if self.rep is not None else 100, quantiles=list(quantiles)
            )
        else:
            result = _compat.gpu_do_bench()(
                kernel_call,
                warmup=self.warmup if self.warmup is not None else 25,
                rep=self.rep if self.rep is not None else 100,
                quantiles=list(quantiles),
            )
        return normalise(result, len(quantiles))

    def _flush(self) -> None:
        self._flush_buffer.zero_()

    def _ready_to_gate(self) -> None:
        """Run once, ungated, what the timed launches run besides the candidate (the flush). With
        CUDA's lazy module loading (the default), the first launch of a kernel in a process loads it,
        and loading waits for the GPU, which waits at the gate for the host: the gate opens only by
        itself, after about 1.4 s on an H200, and the process then times without gates. The candidate
        itself ran once before (:meth:`_estimate`, :meth:`refine`'s warm-up)."""
        if self._flush_buffer is None:
            self._flush_buffer = _compat.l2_flush_buffer()
            self._flush()

    def _timed(self, calls: Sequence[KernelCall], rounds: int) -> list[list[float]]:
        """``rounds`` L2-flushed launches of each call, interleaved in a shuffled order per round
        (:func:`round_orders`), enqueued in gated chunks (:mod:`.gate`) of about
        :data:`CHUNK_LAUNCHES` launches; per-launch ms for each call, by round."""
        import torch

        events = [
            [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(rounds)
            ]
            for _ in calls
        ]
        orders = round_orders(len(calls), rounds, self._order_rng)
        per_piece = max(1, CHUNK_LAUNCHES // len(calls), math.ceil(rounds / GATE_CAPACITY))
        pieces = list(chunked(rounds, per_piece))

        def enqueue(piece: int) -> None:
            for r in pieces[piece]:
                for c in orders[r]:
                    self._flush()
                    start, end = events[c][r]
                    start.record()
                    calls[c]()
                    end.record()

        self._ready_to_gate()
        gate = self._gate()
        if gate is None:
            for piece in range(len(pieces)):
                enqueue(piece)
        else:
            gate.chunks(enqueue, len(pieces))
        torch.cuda.synchronize()
        if gate is not None and gate.timed_out():
            give_up("a gate opened by itself before its chunk was enqueued")
            self._stream_gate = None
        return [[s.elapsed_time(e) for s, e in per_call] for per_call in events]

    def compile_ahead(self, submit: SubmitCompile) -> None:
        """The stream gate's kernel (about a second on an H100 with an empty Triton cache)."""
        if self.gated and self.finalists and self._stream_gate is _UNSET and needs_compile():
            self._gate_compiling = submit(compile_kernel)

    def _gate(self) -> StreamGate | None:
        if not self.gated:
            return None
        if self._stream_gate is _UNSET:
            if self._gate_compiling is not None:  # its failure is make_gate's to find and report
                wait([self._gate_compiling], timeout=AHEAD_WAIT_S)
                self._gate_compiling = None
            self._stream_gate = make_gate()
        return self._stream_gate

    def _estimate(self, call: KernelCall) -> float:
        import torch

        call()  # first launch after compiling loads the module
        torch.cuda.synchronize()
        return max(self._timed([call], 1)[0][0], 1e-4)

    def __call__(self, kernel_call: KernelCall, quantiles: Sequence[float] = QUANTILES) -> list[float]:
        if not self.finalists:
            return self._upstream(kernel_call, quantiles)
        estimate = self._estimate(kernel_call)
        runs = int(min(self.policy.screen_max_runs, max(3, self.policy.screen_ms / estimate)))
        return quantiles_of(self._timed([kernel_call], runs)[0], quantiles)

    def refine(self, kernel_calls: Sequence[KernelCall]) -> list[list[float]]:
        if not kernel_calls:
            return []
        if self.use_cuda_graph or self.warmup is not None or self.rep is not None:
            return [self._upstream(call, self.quantiles) for call in kernel_calls]
        estimates = [self._estimate(call) for call in kernel_calls]
        slowest = max(estimates)
        warm_rounds = max(1, int(self.policy.final_warmup_ms / slowest))
        for _ in range(warm_rounds):
            for call in kernel_calls:
                call()
        rounds = int(min(self.policy.final_max_runs, max(5, self.policy.final_ms / slowest)))
        margin = self.policy.final_margin
        step = rounds if margin <= 0 else max(5, math.ceil(rounds / REFINE_STEPS))
        samples: list[list[float]] = [[] for _ in kernel_calls]
        while len(samples[0]) < rounds:
            more = self._timed(kernel_calls, min(step, rounds - len(samples[0])))
            for acc, new in zip(samples, more):
                acc += new
            if margin > 0 and settled(samples, margin):
                break
        return [quantiles_of(s, self.quantiles) for s in samples]


def make_benchmarker(
    *,
    do_bench: DoBench | None,
    warmup: float | None,
    rep: float | None,
    use_cuda_graph: bool,
    interpreted: bool,
    policy: TimingPolicy | None = None,
    quantiles: Sequence[float] | None = None,
) -> Benchmarker:
    """The benchmarker a tuner uses. A user-given ``do_bench`` is always honoured, GPU or CPU.
    ``quantiles`` (None: :data:`QUANTILES`) are what every timing answers."""
    benchmarker: Benchmarker
    if do_bench is not None:
        benchmarker = UserBenchmarker(do_bench)
    elif interpreted:
        benchmarker = CpuBenchmarker(warmup, rep)
    else:
        benchmarker = GpuBenchmarker(warmup, rep, use_cuda_graph, policy or TimingPolicy())
    if quantiles is not None:
        benchmarker.quantiles = tuple(quantiles)
    return benchmarker
