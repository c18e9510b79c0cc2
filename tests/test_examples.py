"""The examples and the demo, run as a user runs them: fresh processes, Triton's interpreter, tiny sizes.

Each example tunes in one process and must restore in the next with zero benchmark launches
(launches are counted from outside the package, see ``examples/_common.py``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES_DIR))

import _common  # noqa: E402
import demo  # noqa: E402

EXAMPLES = ("matmul", "rmsnorm", "softmax", "attention")


def run(example: str, storage: Path, **kwargs: Any) -> dict[str, Any]:
    return _common.run_example_process(EXAMPLES_DIR / f"{example}.py", storage, gpu=False, **kwargs)


def assert_tuned(report: dict[str, Any]) -> None:
    assert report["ok"], report["stdout"]
    assert report["decision"] == "tuned"
    assert report["configs_timed"] == report["configs_in_space"] > 1  # exhaustive search
    assert report["bench_launches"] >= report["configs_timed"]
    assert Path(report["cache_path"]).is_file()


def assert_restored(first: dict[str, Any], second: dict[str, Any]) -> None:
    assert demo.problems(first, second) == [], second["stdout"]
    assert second["cache_path"] == first["cache_path"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Per example: a storage directory it was tuned into, and the tuning process's report."""
    done: dict[str, tuple[Path, dict[str, Any]]] = {}
    for example in EXAMPLES:
        storage = tmp_path_factory.mktemp(example) / "storage"
        done[example] = storage, run(example, storage)
    return done


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_is_correct_when_tuning(example: str, tuned) -> None:
    _, first = tuned[example]
    assert first["returncode"] == 0
    assert_tuned(first)


@pytest.mark.parametrize("example", EXAMPLES)
def test_second_process_restores_without_benchmarking(example: str, tuned) -> None:
    storage, first = tuned[example]
    second = run(example, storage)
    assert second["returncode"] == 0
    assert_restored(first, second)


def test_restore_survives_lines_added_above_the_kernel(tuned, tmp_path: Path) -> None:
    storage, first = tuned["softmax"]
    moved = _common.copy_with_lines_above_kernel(EXAMPLES_DIR / "softmax.py", tmp_path / "moved")
    assert moved.read_text() != (EXAMPLES_DIR / "softmax.py").read_text()
    second = _common.run_example_process(moved, storage, gpu=False)
    assert_restored(first, second)


def test_a_changed_kernel_is_tuned_again(tuned, tmp_path: Path) -> None:
    """The counterpart of the test above: an edit inside the kernel must not restore a stale result."""
    storage, _ = tuned["softmax"]
    edited = tmp_path / "edited"
    _common.copy_with_lines_above_kernel(EXAMPLES_DIR / "softmax.py", edited)
    source = (edited / "softmax.py").read_text()
    changed = source.replace("row_max = tl.max(lane_max, axis=0)", "row_max = tl.max(lane_max, axis=0) + 0.0")
    assert changed != source
    (edited / "softmax.py").write_text(changed)
    report = _common.run_example_process(edited / "softmax.py", storage, gpu=False)
    assert_tuned(report)


def test_rmsnorm_fallback_heuristic_config_runs_its_pre_hook(tmp_path: Path) -> None:
    """Without tuning, the heuristic's persistent config works only if its pre-hook resets the counter
    before each of the two launches (each launch writes into a NaN-filled buffer)."""
    report = run("rmsnorm", tmp_path / "storage", extra_env={"TRITON_DEJAVU_FORCE_FALLBACK": "1"})
    assert report["decision"] == "heuristic"
    assert report["bench_launches"] == 0
    assert report["config"]["PROGRAMS"] > 0
    assert report["config"]["pre_hook"] == "reset_ticket"
    assert report["ok"], report["stdout"]


def test_examples_check_their_output(tmp_path: Path) -> None:
    """The correctness check can fail: removing rmsnorm's pre-hooks makes the second launch wrong."""
    moved = tmp_path / "broken"
    _common.copy_with_lines_above_kernel(EXAMPLES_DIR / "rmsnorm.py", moved)
    source = (moved / "rmsnorm.py").read_text()
    broken = source.replace('    nargs["ticket_ptr"].zero_()', "    pass")
    assert broken != source
    (moved / "rmsnorm.py").write_text(broken)
    report = _common.run_example_process(
        moved / "rmsnorm.py", tmp_path / "storage", gpu=False, extra_env={"TRITON_DEJAVU_FORCE_FALLBACK": "1"}
    )
    assert not report["ok"]
    assert report["returncode"] == 1


def test_demo_tunes_then_restores_in_a_temporary_directory() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DEJAVU_STORAGE"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES_DIR / "demo.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
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
