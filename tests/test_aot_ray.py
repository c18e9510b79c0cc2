"""``tune --ray``: cases as Ray tasks on a local cluster (2 fake GPUs), results returned as cache
file bytes and merged; a lost task is reported and a re-run completes it; the actors' warnings are
issued once by the driver; Ctrl-C keeps what busy actors stored. Skipped without Ray."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from test_aot import SIZES, SPEC, blocked_root, check_kept_for_merge, statuses, stored  # noqa: E402

import triton_dejavu_like as tdl  # noqa: E402
from triton_dejavu_like.store import inventory  # noqa: E402
from triton_dejavu_like.tools import cli  # noqa: E402
from triton_dejavu_like.tools.aot import command  # noqa: E402

TESTS = str(Path(__file__).parent)
NODE_TAG = "the-nodes-own-tag"


def report_of(out: str) -> dict:
    """The JSON report (Ray's own messages to stdout come before it)."""
    return json.loads(out[out.index("{\n") :] if not out.startswith("{\n") else out)


@pytest.fixture(scope="module")
def crash_marker(tmp_path_factory):
    """The crash case's marker, named in the environment before the cluster starts (Ray's workers
    inherit the environment of ``ray.init``: ``TRITON_INTERPRET=1`` too, as the nodes' own, and a
    tag, as a cluster image may set, that the tests' driver does not have)."""
    marker = tmp_path_factory.mktemp("ray") / "crash"
    mp = pytest.MonkeyPatch()
    mp.setenv("TDL_TEST_CRASH_MARKER", str(marker))
    mp.setenv("TDL_TEST_DRIVER_PID", str(os.getpid()))
    mp.setenv("TRITON_DEJAVU_TAG", NODE_TAG)
    # address="local": a cluster of its own, never one already running on this machine
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield marker
    ray.shutdown()
    mp.undo()


@pytest.mark.slow
def test_ray_tasks_tune_merge_and_a_lost_task_is_completed_by_a_rerun(crash_marker, capsys, tmp_path):
    root = tmp_path / "root"
    marker = crash_marker
    marker.touch()
    argv = ["tune", f"{SPEC}:cases_with_crash", "--root", str(root), "--ray", "--batch-size", "2", "--json"]
    before = ray_folders()

    assert cli.main(argv) == 1
    first = report_of(capsys.readouterr().out)
    # batches: [16, 40] [100, crash] [200, 500] [1000]: the crashed task loses its whole batch...
    lost = {"add-100", "crash"}
    assert statuses(first) == {
        **{f"add-{n}": "tuned" for n in SIZES if f"add-{n}" not in lost},
        **dict.fromkeys(lost, "lost"),
    }
    assert all("Ray task lost" in c["error"] for c in first["cases"] if c["status"] == "lost")
    # ... but what its actor stored before the crash (n=100) is merged, and its folder removed
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == list(SIZES)
    assert ray_folders() <= before

    marker.unlink()
    assert cli.main(argv) == 0
    second = report_of(capsys.readouterr().out)
    assert {n for n, s in statuses(second).items() if s == "tuned"} == {"crash"}
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == sorted([*SIZES, 3000])


def test_a_cluster_without_gpus_is_an_error_not_a_hang(crash_marker, monkeypatch, capsys, tmp_path):
    # each worker asks for a GPU: on a cluster where Ray found none it would wait forever
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    argv = ["tune", f"{SPEC}:cases", "--root", str(tmp_path / "root"), "--ray", "--json"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "no GPU" in err and "--num-gpus" in err
    assert not (tmp_path / "root").exists() or not any((tmp_path / "root").rglob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("trouble", ["hang", "fail"])
def test_workers_that_cannot_start_are_dropped_and_the_run_ends(crash_marker, capsys, tmp_path, trouble):
    # both workers (one per GPU) hang or fail while loading the SPEC: the run ends after the start
    # timeout with every case lost and the reason, instead of waiting forever
    blocker = Path(f"{crash_marker}.{trouble}")
    blocker.touch()
    before = set(Path(tempfile.gettempdir()).glob("tdl-ray-tune-*"))
    root = tmp_path / "root"
    argv = ["tune", f"{SPEC}:cases_workers_cannot_load", "--root", str(root), "--ray", "--json"]
    try:
        # a worker that fails says so at once; only the hang waits for the timeout (a long one for
        # the failure, so that a slow start on a loaded machine is not mistaken for a hang)
        assert cli.main([*argv, "--ray-start-timeout", "8" if trouble == "hang" else "120"]) == 1
    finally:
        blocker.unlink()
    report = report_of(capsys.readouterr().out)
    assert set(statuses(report).values()) == {"lost"}
    assert all("no Ray worker could start" in c["error"] for c in report["cases"])
    assert len(report["errors"]) == 2 and all("did not start" in e for e in report["errors"])
    assert set(Path(tempfile.gettempdir()).glob("tdl-ray-tune-*")) <= before  # nothing left behind
    if trouble == "hang":
        assert all("not ready within 8 s" in e for e in report["errors"])
    else:
        assert all("cannot be loaded here" in e for e in report["errors"]), report["errors"]
    # the dropped workers gave their GPUs back: the same run now tunes everything
    assert cli.main(argv) == 0
    assert set(statuses(report_of(capsys.readouterr().out)).values()) == {"tuned"}
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == list(SIZES)


@pytest.mark.slow
def test_workers_waiting_for_a_gpu_that_is_taken_do_not_hold_the_run(
    crash_marker, monkeypatch, capsys, tmp_path
):
    # Ray counts 4 GPUs (say 2 are held by another job): 2 of the 4 workers can never be placed; the
    # 2 that start take every batch, and the run ends without waiting for the other 2
    real = ray.cluster_resources
    monkeypatch.setattr(ray, "cluster_resources", lambda: {**real(), "GPU": 4.0})
    root = tmp_path / "root"
    argv = ["tune", f"{SPEC}:cases", "--root", str(root), "--ray", "--json"]
    assert cli.main(argv) == 0
    report = report_of(capsys.readouterr().out)
    assert set(statuses(report).values()) == {"tuned"} and not report["errors"]
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == list(SIZES)


def ray_folders() -> set[Path]:
    """The actors' temporary storage roots (the local cluster's actors share this machine's /tmp)."""
    return set(Path(tempfile.gettempdir()).glob("tdl-ray-tune-*"))


@pytest.mark.slow
def test_a_warning_of_both_actors_is_issued_once_by_the_driver(crash_marker, monkeypatch, capsys, tmp_path):
    # each actor issued its own copy, which Ray printed (or not: log_to_driver) and the driver never
    # saw as a warning: the actors return theirs with their answers and the driver issues each once
    monkeypatch.setenv("TRITON_DEJAVU_COMPILE_THREADS", "-3")  # read by each actor as it tunes
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    spec = tmp_path / "spec.py"
    spec.write_text(
        f"import os, sys, time; sys.path.insert(0, {TESTS!r})\n"
        "from pathlib import Path\n"
        "import aot_cases, triton_dejavu_like as tdl\n"
        f"MEETING = Path({str(meeting)!r})\n"
        "def together(n):\n"
        "    (MEETING / str(os.getpid())).touch()  # each case waits for the other actor's: both tune\n"
        "    deadline = time.monotonic() + 120\n"
        "    while len(list(MEETING.iterdir())) < 2 and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n"
        "    aot_cases.add(n)\n"
        "CASES = [tdl.TuneCase(f'add-{n}', together, (n,)) for n in (16, 40)]\n"
    )
    with pytest.warns(tdl.DejavuWarning) as shown:
        status = cli.main(["tune", str(spec), "--root", str(tmp_path / "root"), "--ray", "--json"])
    report = report_of(capsys.readouterr().out)
    assert status == 0 and set(statuses(report).values()) == {"tuned"}
    assert len({case["worker"] for case in report["cases"]}) == 2  # both actors tuned
    bad_value = [w for w in shown if "TRITON_DEJAVU_COMPILE_THREADS='-3' is not valid" in str(w.message)]
    assert len(bad_value) == 1 and bad_value[0].category is tdl.DejavuConfigWarning


@pytest.mark.slow
def test_ctrl_c_keeps_what_a_busy_actor_stored_and_leaves_no_folder(crash_marker, monkeypatch, tmp_path):
    # Ctrl-C (here: raised where the driver reports the first answer) while the other actor is in
    # its batch's second case, which has stored its key: the busy actor was asked to close behind
    # its batch and killed, its keys (the first case's, the half-done case's) lost with its folder
    done_key = tmp_path / "second-key-stored"
    spec = tmp_path / "spec.py"
    spec.write_text(
        f"import sys, time; sys.path.insert(0, {TESTS!r})\n"
        "from pathlib import Path\n"
        "import aot_cases, triton_dejavu_like as tdl\n"
        f"MARKER = Path({str(done_key)!r})\n"
        "def half_done():\n"
        "    aot_cases.add(40)\n"
        "    MARKER.touch()\n"
        "    time.sleep(120)  # the rest of the case, never reached\n"
        "def waits():\n"
        "    deadline = time.monotonic() + 120\n"
        "    while not MARKER.exists() and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n"
        "CASES = [\n"
        "    tdl.TuneCase('add-16', aot_cases.add, (16,)),\n"
        "    tdl.TuneCase('half-done', half_done),\n"
        "    tdl.TuneCase('waits', waits),\n"
        "]\n"
    )

    def interrupt(progress, result):
        raise KeyboardInterrupt

    monkeypatch.setattr(command.Progress, "__call__", interrupt)
    before = ray_folders()
    root = tmp_path / "root"
    # batches: [add-16, half-done] on one actor, [waits] on the other
    argv = ["tune", str(spec), "--root", str(root), "--ray", "--batch-size", "2"]
    start = time.monotonic()
    assert cli.main(argv) == 130
    assert time.monotonic() - start < 120  # the sleeping case was not waited for
    assert sorted(e.key[0] for e in stored(root).get("add_kernel", [])) == [16, 40]
    assert ray_folders() <= before


def test_collecting_a_stopped_actors_root_returns_its_cache_files_and_removes_it(tmp_path):
    # what the driver runs on a killed actor's node; it removes nothing but an actor's root
    from triton_dejavu_like.tools.aot import ray_backend

    root = tmp_path / f"{ray_backend.ROOT_PREFIX}killed"
    (root / "kernel" / "platform").mkdir(parents=True)
    (root / "kernel" / "platform" / "cache.json").write_bytes(b'{"stored": 1}')
    (root / "kernel" / "notes.txt").write_text("not a cache file")
    assert ray_backend.collect_root(str(root)) == {"kernel/platform/cache.json": b'{"stored": 1}'}
    assert not root.exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ValueError, match="not a tuning worker's root"):
        ray_backend.collect_root(str(elsewhere))
    assert elsewhere.exists()


class _NodeGone:
    """Just enough of Ray for a run whose busy actor's node is gone: nothing the driver waits for
    ever finishes."""

    class exceptions:  # as ray.exceptions
        class RayError(Exception):
            pass

    class _Remote:
        def options(self, **_: object) -> _NodeGone._Remote:
            return self

        def remote(self, *_: object) -> object:
            return object()

    def __init__(self) -> None:
        self.killed: list[object] = []

    def remote(self, **_: object):
        return lambda target: self._Remote()

    def put(self, value: object) -> object:
        return value

    def kill(self, actor: object) -> None:
        self.killed.append(actor)

    def wait(self, refs: list, num_returns: int, timeout: float) -> tuple[list, list]:
        return [], refs

    def get(self, ref: object, timeout: float | None = None) -> object:
        raise AssertionError("nothing finished")


def test_an_interrupted_run_whose_actor_nodes_are_gone_warns_and_ends(tmp_path, monkeypatch):
    # the roots of actors killed in a batch cannot be collected (their nodes are gone: the task never
    # answers, or Ray no longer takes the node's id): the driver waits at most the stop timeout, names
    # each folder left there, and kills every actor
    from triton_dejavu_like import DejavuStorageWarning
    from triton_dejavu_like.tools.aot import ray_backend

    monkeypatch.setattr(ray_backend, "STOP_TIMEOUT_S", 0.5)
    fake = _NodeGone()
    target = tmp_path / "target"
    target.mkdir()
    scheduler = ray_backend._Scheduler(fake, "spec", target, lambda result: None, 10.0)
    homes = {"silent": "ab" * 28, "unknown": "f" * 56}  # Ray's nil node id is refused
    for name, node in homes.items():
        busy = object()
        scheduler.actors.append(busy)
        scheduler.running[object()] = (busy, [f"{name}-case"])
        scheduler.homes[busy] = (node, f"/nowhere/{ray_backend.ROOT_PREFIX}{name}")
    start = time.monotonic()
    with pytest.warns(DejavuStorageWarning) as shown:
        scheduler.shut_down()
    assert time.monotonic() - start < 5
    said = sorted(str(w.message) for w in shown)
    assert [s.split(" on its node")[0].split("/")[-1] for s in said] == [
        f"{ray_backend.ROOT_PREFIX}silent",
        f"{ray_backend.ROOT_PREFIX}unknown",
    ]
    assert "no answer within 0.5 s" in said[0] and "Invalid node_id" in said[1]
    assert set(fake.killed) >= set(scheduler.actors)
    assert not any(target.rglob("*.json"))


@pytest.mark.slow
def test_the_drivers_triton_interpret_is_not_passed_to_actors(crash_marker, monkeypatch, capsys, tmp_path):
    # a CPU-only driver needs TRITON_INTERPRET=1 to load the SPEC; passed on to the actors, GPU nodes
    # tuned Triton's interpreter and stored it as their results. Each node's own environment decides:
    # here the local cluster's (started with TRITON_INTERPRET=1), whatever the driver's value
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    argv = ["tune", f"{SPEC}:cases", "--root", str(tmp_path / "root"), "--ray", "--json"]
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        status = cli.main(argv)
    report = report_of(capsys.readouterr().out)
    assert set(statuses(report).values()) == {"tuned"} and status == 0  # not "failed": no GPU here
    said = [w for w in shown if "TRITON_INTERPRET" in str(w.message)]  # and the driver says why, once
    assert len(said) == 1 and said[0].category is tdl.DejavuConfigWarning
    assert "not passed to the Ray workers" in str(said[0].message)


@pytest.mark.slow
def test_cases_whose_results_cannot_be_merged_fail_and_the_results_are_kept(
    crash_marker, monkeypatch, capsys, tmp_path
):
    # the driver cannot write into --root: the cases were reported "tuned", the problem printed once
    # per case, and the actors' roots (the only copy of the results) removed. As with --workers: each
    # case fails "tuned but not merged", the problem is listed once, and the results are kept here
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the driver keeps them
    root, blocker = blocked_root(tmp_path)
    argv = ["tune", f"{SPEC}:cases", "--root", str(root), "--ray", "--batch-size", "2", "--json"]
    assert cli.main(argv) == 1
    check_kept_for_merge(report_of(capsys.readouterr().out), root, blocker)


@pytest.mark.slow
def test_a_spec_file_named_relative_to_the_drivers_directory_loads_on_the_actors(
    crash_marker, monkeypatch, capsys, tmp_path
):
    # the actors' working directory is not the driver's: the relative path failed on every actor
    monkeypatch.chdir(Path(SPEC).parent)
    argv = ["tune", f"{Path(SPEC).name}:cases", "--root", str(tmp_path / "root"), "--ray", "--json"]
    status = cli.main(argv)
    report = report_of(capsys.readouterr().out)
    assert set(statuses(report).values()) == {"tuned"} and status == 0, report["errors"]
    assert sorted(e.key[0] for e in stored(tmp_path / "root")["add_kernel"]) == list(SIZES)


@pytest.mark.slow
def test_sigterm_stops_a_ray_run_as_ctrl_c_does(crash_marker, monkeypatch, tmp_path):
    # ray.init replaced tune's SIGTERM handler with its own, which exits at once (status 1, or an
    # abort): what the busy actors stored was lost and their folders left. Here the driver connects
    # anew (the fake init installs Ray's handler, as ray.init does) and is sent SIGTERM when the
    # first answer comes
    connected = []

    def init(**_: object) -> None:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # as ray.init does
        connected.append(True)

    monkeypatch.setattr(ray, "is_initialized", lambda: bool(connected))
    monkeypatch.setattr(ray, "init", init)
    reported = []

    def terminated(progress, result):
        reported.append(result.name)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs here

    monkeypatch.setattr(command.Progress, "__call__", terminated)
    before = ray_folders()
    root = tmp_path / "root"
    argv = ["tune", f"{SPEC}:cases", "--root", str(root), "--ray", "--batch-size", "3"]
    try:
        status = cli.main(argv)
    except SystemExit as exc:
        status = f"exited: {exc.code}"
    assert status == 130
    assert {f"add-{e.key[0]}" for e in stored(root)["add_kernel"]} >= set(reported) != set()
    assert ray_folders() <= before


@pytest.mark.slow
def test_ctrl_c_while_the_driver_merges_an_answer_leaves_no_folder(crash_marker, monkeypatch, tmp_path):
    # the answering actor was neither running nor idle while its answer was merged: interrupted then,
    # it was killed without being closed or collected, and its folder left on its node
    from triton_dejavu_like.tools.aot import merging

    real = merging.merge_bytes
    calls = []

    def interrupted_once(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(merging, "merge_bytes", interrupted_once)
    before = ray_folders()
    root = tmp_path / "root"
    argv = ["tune", f"{SPEC}:cases", "--root", str(root), "--ray", "--batch-size", "3"]
    assert cli.main(argv) == 130
    assert ray_folders() <= before
    assert len(stored(root)["add_kernel"]) >= 3  # the interrupted answer's batch, collected


@pytest.mark.slow
def test_the_nodes_own_dejavu_variables_do_not_change_the_results(crash_marker, capsys, tmp_path):
    # the cluster's nodes have TRITON_DEJAVU_TAG set (the fixture), the driver does not: the results
    # were stored under the nodes' tag, not under the driver's identity
    root = tmp_path / "root"
    assert cli.main(["tune", f"{SPEC}:cases", "--root", str(root), "--ray", "--json"]) == 0
    capsys.readouterr()
    files, _ = inventory.read_sources([root])
    assert {f.identity["tag"] for f in files} == {"default"}


@pytest.mark.slow
def test_what_a_read_only_layer_holds_is_not_merged_into_the_root(
    crash_marker, monkeypatch, capsys, tmp_path
):
    # the actors do not see the layers of TRITON_DEJAVU_STORAGE: they tuned the keys again and the
    # driver merged them into the root, where they hid the layer's winners from every serving process
    local, team = tmp_path / "local", tmp_path / "team"
    assert cli.main(["tune", f"{SPEC}:cases", "--root", str(team), "--json"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", os.pathsep.join([str(local), str(team)]))
    assert cli.main(["tune", f"{SPEC}:cases", "--ray", "--json"]) == 0
    report = report_of(capsys.readouterr().out)
    assert statuses(report) == {f"add-{n}": "stored" for n in SIZES}  # as a run in this process says
    assert not local.exists() or stored(local) == {}
