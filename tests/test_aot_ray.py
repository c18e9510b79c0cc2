"""``tune --ray``: cases as Ray tasks on a local cluster (2 fake GPUs), results returned as cache
file bytes and merged; a lost task is reported and a re-run completes it. Skipped without Ray."""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray")

from test_aot import SIZES, SPEC, statuses, stored  # noqa: E402

from triton_dejavu_like.tools import cli  # noqa: E402


def report_of(out: str) -> dict:
    """The JSON report (Ray's own messages to stdout come before it)."""
    return json.loads(out[out.index("{\n") :] if not out.startswith("{\n") else out)


@pytest.fixture(scope="module")
def crash_marker(tmp_path_factory):
    """The crash case's marker, named in the environment before the cluster starts (Ray's workers
    inherit the environment of ``ray.init``)."""
    marker = tmp_path_factory.mktemp("ray") / "crash"
    mp = pytest.MonkeyPatch()
    mp.setenv("TDL_TEST_CRASH_MARKER", str(marker))
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield marker
    ray.shutdown()
    mp.undo()


@pytest.mark.slow
def test_ray_tasks_tune_merge_and_a_lost_task_is_completed_by_a_rerun(crash_marker, capsys, tmp_path):
    root = tmp_path / "root"
    marker = crash_marker
    marker.touch()
    argv = ["tune", f"{SPEC}:cases_with_crash", "--root", str(root), "--ray", "--batch-size", "3", "--json"]

    assert cli.main(argv) == 1
    first = report_of(capsys.readouterr().out)
    # batches: [16, 40, 100] [crash, 200, 500] [1000]: the crashed task loses its whole batch
    lost = {"crash", "add-200", "add-500"}
    assert statuses(first) == {
        **{f"add-{n}": "tuned" for n in SIZES if f"add-{n}" not in lost},
        **dict.fromkeys(lost, "lost"),
    }
    assert all("Ray task lost" in c["error"] for c in first["cases"] if c["status"] == "lost")
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == [16, 40, 100, 1000]

    marker.unlink()
    assert cli.main(argv) == 0
    second = report_of(capsys.readouterr().out)
    assert {n for n, s in statuses(second).items() if s == "tuned"} == lost
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == sorted([*SIZES, 3000])


def test_a_cluster_without_gpus_is_an_error_not_a_hang(crash_marker, monkeypatch, capsys, tmp_path):
    # each worker asks for a GPU: on a cluster where Ray found none it would wait forever
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    argv = ["tune", f"{SPEC}:cases", "--root", str(tmp_path / "root"), "--ray", "--json"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "no GPU" in err and "--num-gpus" in err
    assert not (tmp_path / "root").exists() or not any((tmp_path / "root").rglob("*.json"))
