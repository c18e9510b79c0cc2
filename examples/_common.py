"""What the examples share: device choice, problem sizes, benchmark counting, reports, subprocess runs.

Every example is a script (``python examples/<name>.py``) that runs its kernel on the GPU when there
is one and through Triton's interpreter on the CPU otherwise, checks the output against torch, and
reports whether the autotuner tuned or restored, and how many benchmark runs that took.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

EXAMPLES_DIR = Path(__file__).resolve().parent

DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
}


def _interpret_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on")


def select_backend() -> bool:
    """True to run on the GPU; otherwise switch Triton to its interpreter and return False.

    Triton decides between compiling and interpreting when a ``@triton.jit`` function is defined,
    including its own library functions (``tl.cdiv``, ...), which are defined when ``triton`` is
    first imported: so this runs when this module is imported, and examples import it first.
    """
    if not _interpret_requested() and torch.cuda.is_available():
        return True
    if not _interpret_requested() and "triton" in sys.modules:
        raise RuntimeError("import _common before triton: without a GPU it must turn on TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    return False


#: True on a GPU; False under Triton's interpreter (no GPU, or ``TRITON_INTERPRET=1``).
ON_GPU: bool = select_backend()
#: Where the examples put their tensors.
DEVICE: str = "cuda" if ON_GPU else "cpu"


def generator(seed: int = 0) -> torch.Generator:
    """A seeded generator on :data:`DEVICE`, so every run of an example sees the same inputs."""
    return torch.Generator(device=DEVICE).manual_seed(seed)


def device_name() -> str:
    return torch.cuda.get_device_name() if ON_GPU else "CPU (Triton interpreter)"


def synchronize() -> None:
    if ON_GPU:
        torch.cuda.synchronize()


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest absolute difference, relative to the largest magnitude of the reference.

    A NaN or infinity anywhere in the output gives ``inf``, which fails every tolerance.
    """
    if not torch.isfinite(out).all():
        return math.inf
    diff = (out.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    return diff / scale if scale > 0 else diff


@contextmanager
def count_launches(kernel: Any) -> Iterator[list[int]]:
    """Count launches of an autotuned kernel while the block runs (compile-only warmups excluded).

    The autotuner launches the jitted function once per call of the kernel and, while tuning, many
    more times to time candidates: every launch beyond the caller's own is a benchmark launch,
    whichever timer the package uses. The count comes from wrapping ``run`` on this one jitted
    function object, which changes nothing the autotuner hashes or stores. Launches made in a
    worker process (``TRITON_DEJAVU_USE_ISOLATED_PROCESS=1``) are not seen. Yields a one-element
    list holding the count.
    """
    jitted = kernel.fn
    shadowed = "run" in vars(jitted)
    original = jitted.run
    count = [0]

    def counting_run(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("warmup", False):
            count[0] += 1
        return original(*args, **kwargs)

    jitted.run = counting_run
    try:
        yield count
    finally:
        if shadowed:
            jitted.run = original
        else:
            del jitted.run


def describe_config(config: Any) -> dict[str, Any] | None:
    """The meta-parameters and launch options of a ``triton.Config``, as plain JSON values."""
    if config is None:
        return None
    described = dict(config.kwargs)
    described.update(num_warps=config.num_warps, num_stages=config.num_stages)
    described["pre_hook"] = getattr(config.pre_hook, "__name__", None) if config.pre_hook else None
    return described


@dataclass
class ExampleResult:
    """What one run of an example found: accuracy, the autotuner's decision and what it cost."""

    example: str
    device: str
    problem: dict[str, Any]
    max_error: float
    tolerance: float
    decision: str | None
    config: dict[str, Any] | None
    configs_in_space: int
    configs_timed: int
    bench_launches: int
    first_call_s: float
    tuning_s: float | None
    cache_path: str
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.max_error <= self.tolerance  # False for NaN

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def _results_line(self) -> str:
        """The stored file, only when it exists (a heuristic or an unwritable root stores nothing)."""
        if Path(self.cache_path).is_file():
            return f"  results: {self.cache_path}"
        return f"  results: nothing on disk (the {self.decision} config was not stored)"

    def summary(self) -> str:
        problem = ", ".join(f"{k}={v}" for k, v in self.problem.items())
        verdict = "OK" if self.ok else "WRONG"
        config = ", ".join(f"{k}={v}" for k, v in (self.config or {}).items() if v is not None)
        lines = [
            f"{self.example} on {self.device} ({problem})",
            f"  output: max relative error {self.max_error:.2e} (tolerance {self.tolerance:.0e}): {verdict}",
            f"  autotuner: {self.decision} in {self.first_call_s:.2f} s; {self.configs_timed} of "
            f"{self.configs_in_space} configs timed, {self.bench_launches} benchmark launches",
            f"  config: {config}",
            self._results_line(),
        ]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def evaluate(
    name: str,
    kernel: Any,
    call: Callable[[], torch.Tensor],
    reference: Callable[[], torch.Tensor],
    *,
    tolerance: float,
    problem: Mapping[str, Any],
    dtype: torch.dtype,
    launches: int = 2,
) -> ExampleResult:
    """Run ``call`` (one kernel launch) ``launches`` times and check every output against torch.

    The first call tunes, restores or asks the heuristic; the later ones take the autotuner's
    in-memory fast path, and checking them too catches a config whose hooks did not run.
    """
    with count_launches(kernel) as launched:
        start = time.perf_counter()
        outputs = [call()]
        synchronize()
        first_call_s = time.perf_counter() - start
        decision, tuning_s = kernel.last_decision, kernel.bench_time
        configs_timed = len(kernel.configs_timings) if decision == "tuned" else 0
        outputs += [call() for _ in range(launches - 1)]
        synchronize()
    ref = reference()
    error = max(relative_error(out, ref) for out in outputs)  # no NaN: relative_error gives inf
    return ExampleResult(
        example=name,
        device=device_name(),
        problem={**problem, "dtype": str(dtype).removeprefix("torch.")},
        max_error=error,
        tolerance=tolerance,
        decision=decision,
        config=describe_config(kernel.best_config),
        configs_in_space=len(kernel.configs),
        configs_timed=configs_timed,
        bench_launches=launched[0] - launches,
        first_call_s=first_call_s,
        tuning_s=tuning_s if decision == "tuned" else None,
        cache_path=str(kernel.cache_path()),
    )


def main(run: Callable[[str, torch.dtype], ExampleResult], doc: str | None) -> int:
    """Command line of every example: ``--size``, ``--dtype``, ``--report FILE``; exit 1 if wrong."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    parser.add_argument(
        "--size",
        choices=("tiny", "full"),
        default="full" if ON_GPU else "tiny",
        help="problem size (default: full on a GPU, tiny under the interpreter)",
    )
    parser.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float16" if ON_GPU else "float32",
        help="element type (default: float16 on a GPU, float32 under the interpreter)",
    )
    parser.add_argument("--report", type=Path, help="also write the result as JSON to this file")
    args = parser.parse_args()
    result = run(args.size, DTYPES[args.dtype])
    print(result.summary())
    if args.report is not None:
        args.report.write_text(json.dumps(result.as_dict(), indent=1))
    return 0 if result.ok else 1


# --- running examples in fresh processes (the demo and the tests) -------------------------------------


def example_env(storage: Path, *, gpu: bool, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the given storage root, and the interpreter on or off."""
    env = dict(os.environ)
    env["TRITON_DEJAVU_STORAGE"] = str(storage)
    if gpu:
        env.pop("TRITON_INTERPRET", None)
    else:
        env["TRITON_INTERPRET"] = "1"
    env.update(extra or {})
    return env


def run_example_process(
    script: Path,
    storage: Path,
    *,
    gpu: bool,
    args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    timeout_s: float = 600,
) -> dict[str, Any]:
    """Run an example script in a fresh Python process and return its JSON report.

    Raises ``RuntimeError`` with the process's output when it wrote no report (it crashed).
    """
    storage.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="example-report-") as tmp:
        report = Path(tmp) / "report.json"
        proc = subprocess.run(
            [sys.executable, str(script), "--report", str(report), *args],
            env=example_env(storage, gpu=gpu, extra=extra_env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if not report.exists():
            raise RuntimeError(
                f"{script.name} exited with status {proc.returncode} without a report\n"
                f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
            )
        result = json.loads(report.read_text())
    result["returncode"] = proc.returncode
    result["stdout"] = proc.stdout
    return result


def copy_with_lines_above_kernel(script: Path, dest_dir: Path, *, extra_lines: int = 7) -> Path:
    """Copy an example (and this module) to ``dest_dir`` with comment and blank lines inserted just
    above its ``@tdl.autotune`` line: the kernel moves down, its code does not change.
    """
    lines = script.read_text().splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.startswith("@tdl.autotune")), None)
    if at is None:
        raise ValueError(f"{script} has no line starting with @tdl.autotune")
    inserted = ["# This comment and the blank lines below moved the kernel down.\n"]
    inserted += ["\n"] * (extra_lines - 1)
    dest_dir.mkdir(parents=True, exist_ok=True)
    copy = dest_dir / script.name
    copy.write_text("".join(lines[:at] + inserted + lines[at:]))
    (dest_dir / Path(__file__).name).write_text(Path(__file__).read_text())
    return copy
