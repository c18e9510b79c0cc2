"""The timeline diagnostic (``benchmarks/tuning_timeline.py``) still hooks into the search and the
pipeline: every result of a tuning run shows up in its counts (interpreter, the 12-config space)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "tuning_timeline.py"


@pytest.mark.slow
@pytest.mark.skipif(not SCRIPT.is_file(), reason=f"no {SCRIPT} in this tree")
def test_the_timeline_counts_every_result_of_a_run():
    env = dict(os.environ, PYTHONPATH=str(SCRIPT.parents[1]))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--runs", "64x64x64:random:0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    run = json.loads(done.stdout.strip().splitlines()[-1])
    assert run["evaluated"] == 12  # the tiny space, measured in full (too small for an adaptive stop)
    assert sum(run["tells_per_s_by_second"]) == run["evaluated"]
    assert 0 <= run["ask_s"] <= run["search_span_s"] <= run["first_call_s"]
    assert run["parent_other_s"] > 0  # under the interpreter the time goes to timing candidates
