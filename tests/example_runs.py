"""Running the examples in fresh processes and checking their reports (the CPU and the GPU suites)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES_DIR))

import _common  # noqa: E402
import demo  # noqa: E402

EXAMPLES = ("matmul", "rmsnorm", "softmax", "attention")


def run(script: str | Path, storage: Path, *, gpu: bool, **kwargs: Any) -> dict[str, Any]:
    """Run an example (a name from :data:`EXAMPLES`, or a script path) and return its report."""
    path = EXAMPLES_DIR / f"{script}.py" if isinstance(script, str) else script
    return _common.run_example_process(path, storage, gpu=gpu, **kwargs)


def assert_tuned(report: dict[str, Any]) -> None:
    """The process tuned exhaustively, timed every config, stored the result and computed it right."""
    assert report["ok"], report["stdout"]
    assert report["returncode"] == 0
    assert report["decision"] == "tuned"
    assert report["configs_timed"] == report["configs_in_space"] > 1
    assert report["bench_launches"] >= report["configs_timed"]
    assert Path(report["cache_path"]).is_file()


def assert_restored(first: dict[str, Any], second: dict[str, Any]) -> None:
    """The second process restored the first one's config from the same file, with no benchmark launch."""
    assert demo.problems(first, second) == [], second["stdout"]
    assert second["returncode"] == 0
    assert second["cache_path"] == first["cache_path"]


def tune_each(
    tmp_path_factory: pytest.TempPathFactory, *, gpu: bool, args: tuple[str, ...] = ()
) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Per example: a fresh storage directory, and the report of the process that tuned into it.

    Meant for a module-scoped fixture, which runs before conftest's per-test clean-up of the
    environment: the package's variables are cleared here too.
    """
    tuned = {}
    with pytest.MonkeyPatch.context() as env:
        for name in list(os.environ):
            if name.lstrip("_").startswith("TRITON_DEJAVU_") or name == "TRITON_PRINT_AUTOTUNING":
                env.delenv(name)
        for example in EXAMPLES:
            storage = tmp_path_factory.mktemp(example) / "storage"
            tuned[example] = storage, run(example, storage, gpu=gpu, args=args)
    return tuned


def edited_copy(example: str, dest_dir: Path, old: str, new: str) -> Path:
    """A copy of an example (with the helpers it imports) in which ``old`` is replaced by ``new``."""
    script = _common.copy_with_lines_above_kernel(EXAMPLES_DIR / f"{example}.py", dest_dir)
    source = script.read_text()
    if old not in source:
        raise ValueError(f"{old!r} is not in {example}.py")
    script.write_text(source.replace(old, new))
    return script


def run_demo(env: Mapping[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``examples/demo.py`` as the README does, in the given environment."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES_DIR / "demo.py")],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
