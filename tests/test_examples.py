"""The examples and the demo, run as a user runs them: fresh processes, Triton's interpreter, tiny sizes.

Each example tunes in one process and must restore in the next with zero benchmark launches
(launches are counted from outside the package, see ``examples/_common.py``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from example_runs import (
    EXAMPLES,
    EXAMPLES_DIR,
    _common,
    assert_restored,
    assert_tuned,
    demo,
    edited_copy,
    run,
    run_demo,
    tune_each,
)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory):
    return tune_each(tmp_path_factory, gpu=False)


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_is_correct_when_tuning(example: str, tuned) -> None:
    assert_tuned(tuned[example][1])


@pytest.mark.parametrize("example", EXAMPLES)
def test_second_process_restores_without_benchmarking(example: str, tuned) -> None:
    storage, first = tuned[example]
    assert_restored(first, run(example, storage, gpu=False))


def test_restore_survives_lines_added_above_the_kernel(tuned, tmp_path: Path) -> None:
    storage, first = tuned["softmax"]
    moved = _common.copy_with_lines_above_kernel(EXAMPLES_DIR / "softmax.py", tmp_path)
    assert moved.read_text() != (EXAMPLES_DIR / "softmax.py").read_text()
    assert_restored(first, run(moved, storage, gpu=False))


def test_a_changed_kernel_is_tuned_again(tuned, tmp_path: Path) -> None:
    """The counterpart of the test above: an edit inside the kernel must not restore a stale result."""
    storage, _ = tuned["softmax"]
    line = "row_max = tl.max(lane_max, axis=0)"
    edited = edited_copy("softmax", tmp_path, line, f"{line} + 0.0")
    assert_tuned(run(edited, storage, gpu=False))


def test_rmsnorm_fallback_heuristic_config_runs_its_pre_hook(tmp_path: Path) -> None:
    """Without tuning, the heuristic's persistent config works only if its pre-hook resets the counter
    before each of the two launches (each launch writes into a NaN-filled buffer)."""
    report = run("rmsnorm", tmp_path, gpu=False, extra_env={"TRITON_DEJAVU_FORCE_FALLBACK": "1"})
    assert report["decision"] == "heuristic"
    assert report["bench_launches"] == 0
    assert report["config"]["PROGRAMS"] > 0
    assert report["config"]["pre_hook"] == "reset_ticket"
    assert report["ok"], report["stdout"]
    assert "results: nothing on disk (the heuristic config was not stored)" in report["stdout"]


def test_examples_check_their_output(tmp_path: Path) -> None:
    """The correctness check can fail: with rmsnorm's pre-hook emptied, the second launch is wrong."""
    broken = edited_copy("rmsnorm", tmp_path / "broken", '    nargs["ticket_ptr"].zero_()', "    pass")
    report = run(broken, tmp_path / "storage", gpu=False, extra_env={"TRITON_DEJAVU_FORCE_FALLBACK": "1"})
    assert not report["ok"]
    assert report["returncode"] == 1


def test_demo_tunes_then_restores_in_a_temporary_directory() -> None:
    proc = run_demo({k: v for k, v in os.environ.items() if k != "TRITON_DEJAVU_STORAGE"}, timeout_s=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"process 1: tuned in .* [1-9]\d* benchmark launches", proc.stdout), proc.stdout
    assert re.search(r"process 2: restored in .* 0 benchmark launches", proc.stdout), proc.stdout
    results = re.search(r"results: (\S+)", proc.stdout)
    assert results is not None and not Path(results.group(1)).exists()  # the temporary directory is gone


REPORT = {
    "ok": True,
    "max_error": 1e-7,
    "tolerance": 1e-5,
    "decision": "restored",
    "bench_launches": 0,
    "config": {"BLOCK": 64, "num_warps": 4},
}


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"decision": "tuned", "bench_launches": 12}, "did not restore"),
        ({"bench_launches": 3}, "3 benchmark launches"),
        ({"ok": False, "max_error": 0.5}, "wrong result"),
        ({"config": {"BLOCK": 32, "num_warps": 4}}, "not the tuned"),
    ],
)
def test_demo_fails_when_the_second_process_does_not_simply_restore(change, complaint) -> None:
    first = {**REPORT, "decision": "tuned", "bench_launches": 40}
    assert demo.problems(first, REPORT) == []
    found = demo.problems(first, {**REPORT, **change})
    assert any(complaint in message for message in found), found
