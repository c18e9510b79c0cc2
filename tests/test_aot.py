"""``tune SPEC`` (in process, worker processes, a worker killed, export) and ``heuristic KERNEL``."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_helpers import make_entry

import triton_dejavu_like as tdl
from triton_dejavu_like import DejavuStorageWarning
from triton_dejavu_like.codec import key_id
from triton_dejavu_like.store import StoredEntry, identity, inventory, layout
from triton_dejavu_like.tools import cli, heuristic
from triton_dejavu_like.tools.aot import command, pool

SPEC = str(Path(__file__).with_name("aot_cases.py"))
SIZES = (16, 40, 100, 200, 500, 1000)


def tune(capsys, *argv: str) -> tuple[int, dict]:
    status = cli.main(["tune", *argv, "--json"])
    return status, json.loads(capsys.readouterr().out)


def statuses(report: dict) -> dict[str, str]:
    return {case["name"]: case["status"] for case in report["cases"]}


def stored(root: Path) -> dict[str, list]:
    """Kernel name -> every stored entry (a key stored twice would show twice)."""
    files, problems = inventory.read_sources([root])
    assert not problems
    out: dict[str, list] = {}
    for f in files:
        out.setdefault(f.identity["kernel"], []).extend(f.entries.values())
    return out


def best_block(n: int) -> int:
    return 16 if n < 64 else 32 if n < 300 else 128


def test_tune_in_process_tunes_each_case_once_then_finds_all_stored(capsys, tmp_path):
    root = tmp_path / "root"
    status, first = tune(capsys, SPEC, "--root", str(root))
    assert status == 0 and first["ok"]
    assert statuses(first) == {f"add-{n}": "tuned" for n in SIZES}
    assert all(len(case["tuned"]) == 1 for case in first["cases"])
    entries = stored(root)["add_kernel"]
    assert sorted(e.key[0] for e in entries) == sorted(SIZES)
    assert {e.key[0]: e.config.kwargs["BLOCK"] for e in entries} == {n: best_block(n) for n in SIZES}

    status, second = tune(capsys, SPEC, "--root", str(root))
    assert status == 0 and statuses(second) == {f"add-{n}": "stored" for n in SIZES}
    assert len(stored(root)["add_kernel"]) == len(SIZES)


def test_tune_restores_what_a_read_only_layer_holds(capsys, tmp_path, monkeypatch):
    """A serving image reads TRITON_DEJAVU_STORAGE=local:team; tune with the same variable tunes only
    what neither holds. It dropped the layers: every key was tuned again into local, and local's new
    entries then hid the team's winners from every serving process."""
    local, team = tmp_path / "local", tmp_path / "team"
    assert tune(capsys, SPEC, "--root", str(team))[0] == 0
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", os.pathsep.join([str(local), str(team)]))
    status, report = tune(capsys, SPEC)
    assert status == 0 and statuses(report) == {f"add-{n}": "stored" for n in SIZES}
    assert not local.exists() or stored(local) == {}  # nothing tuned, nothing written
    assert os.environ["TRITON_DEJAVU_STORAGE"] == os.pathsep.join([str(local), str(team)])


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]])
def test_tune_restores_what_the_layers_of_its_root_option_hold(capsys, tmp_path, workers):
    """tune --root local:team (or --root repeated) dropped team: every key was tuned again into local,
    whose entries then hid team's winners from a process serving with the same layers."""
    local, team = tmp_path / "local", tmp_path / "team"
    assert tune(capsys, SPEC, "--root", str(team))[0] == 0
    environment = os.environ.get("TRITON_DEJAVU_STORAGE")
    for root in (
        ["--root", os.pathsep.join([str(local), str(team)])],
        ["--root", str(local), "--root", str(team)],
    ):
        status, report = tune(capsys, SPEC, *root, *workers)
        assert status == 0 and statuses(report) == {f"add-{n}": "stored" for n in SIZES}
        assert not local.exists() or stored(local) == {}  # nothing tuned, nothing written
    assert os.environ.get("TRITON_DEJAVU_STORAGE") == environment
    missing = tmp_path / "no-such-layer"
    assert cli.main(["tune", SPEC, "--root", os.pathsep.join([str(local), str(missing)])]) == 2
    assert f"no storage at {missing}" in capsys.readouterr().err


def test_tune_prints_a_line_per_case_and_a_summary_table(capsys, tmp_path):
    assert cli.main(["tune", f"{SPEC}:cases", "--root", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "[1/6] add-16: tuned in" in out and "[6/6] add-1000: tuned in" in out
    assert "CASE" in out and "STATUS" in out and "add_kernel: 1" in out
    assert "6 case(s) in" in out and "6 tuned" in out


def test_a_failing_case_fails_the_run_and_the_others_are_kept(capsys, tmp_path):
    spec = tmp_path / "spec.py"
    spec.write_text(
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import aot_cases, triton_dejavu_like as tdl\n"
        "def boom():\n    raise RuntimeError('no such shape')\n"
        "CASES = [*aot_cases.cases()[:2], tdl.TuneCase('boom', boom)]\n"
    )
    status, report = tune(capsys, str(spec), "--root", str(tmp_path / "root"))
    assert status == 1 and not report["ok"]
    assert statuses(report) == {"add-16": "tuned", "add-40": "tuned", "boom": "failed"}
    assert "no such shape" in report["cases"][2]["error"]
    assert len(stored(tmp_path / "root")["add_kernel"]) == 2


def test_a_case_that_calls_sys_exit_fails_only_that_case(capsys, tmp_path):
    # run in process, sys.exit(0) in a case (a script's main reused) ended the whole run with
    # status 0: no summary, and the cases after it never ran
    spec = tmp_path / "spec.py"
    spec.write_text(
        "import sys, triton_dejavu_like as tdl\n"
        "def nothing():\n    pass\n"
        "def leave():\n    sys.exit(0)\n"
        "CASES = [tdl.TuneCase('a', nothing), tdl.TuneCase('exits', leave), tdl.TuneCase('c', nothing)]\n"
    )
    status, report = tune(capsys, str(spec), "--root", str(tmp_path / "root"))
    assert statuses(report) == {"a": "stored", "exits": "failed", "c": "stored"}
    assert status == 1 and "SystemExit" in report["cases"][1]["error"]


def test_progress_lines_escape_what_the_spec_names(capsys, tmp_path):
    """Case names and errors reached the terminal raw in the progress lines (the table escaped them)."""
    spec = tmp_path / "spec.py"
    spec.write_text(
        "import triton_dejavu_like as tdl\n"
        "def boom():\n    raise ValueError('bad\\x1b[31m red')\n"
        "CASES = [tdl.TuneCase('fails\\x1b[2J', boom)]\n"
    )
    assert cli.main(["tune", str(spec), "--root", str(tmp_path / "root")]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "[1/1] fails\\x1b[2J: failed in " in out and "ValueError: bad\\x1b[31m red" in out


def test_bad_specs_are_reported(capsys, tmp_path):
    """A SPEC that is not there is a typo (exit 2, as a --kernel of import-dejavu that cannot be
    loaded; it exited 1); one whose code raises is an input that cannot be used (exit 1)."""
    for spec, says in (
        (str(tmp_path / "missing.py"), "no such spec file"),
        ("no_such_module_here", "no such spec file or module: no_such_module_here"),
        ("no_such_package_here.cases", "no such spec file or module"),
        (f"{SPEC}:nothing", "has no attribute 'nothing'"),
        ("", "the SPEC named is empty"),  # tune "$SPEC" with SPEC unset: exit 1, "Empty module name"
        (" ", "the SPEC named is empty"),
    ):
        assert cli.main(["tune", spec, "--root", str(tmp_path / "root")]) == 2, spec
        assert says in capsys.readouterr().err
    raising = tmp_path / "raising_spec.py"
    raising.write_text("import no_such_dependency_here\n")
    for spec in (str(raising), "raising_spec"):
        assert cli.main(["tune", spec, "--root", str(tmp_path / "root")]) == 1
        assert "ModuleNotFoundError: No module named 'no_such_dependency_here'" in capsys.readouterr().err
    assert not (tmp_path / "root").exists()
    assert cli.main(["tune", SPEC, "--workers", "2", "--gpus", "0"]) == 2
    with pytest.raises(tdl.tools.aot.case.SpecError):
        tdl.TuneCase("", print)
    # args=("abc") for ("abc",): it would call fn("a", "b", "c")
    with pytest.raises(
        tdl.tools.aot.case.SpecError, match="args must be a tuple of arguments, not the string"
    ):
        tdl.TuneCase("case", print, "abc")


def test_gpu_indices_number_the_gpus_this_process_sees(monkeypatch, capsys, tmp_path):
    """--gpus 0,1 under CUDA_VISIBLE_DEVICES=2,3 gave the workers the host's GPUs 0 and 1, which the
    job does not own; an index of no visible GPU, or an empty --gpus ("$GPUS" unset: the cases ran
    in this process), was accepted."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert command.parse_gpus("all") == ["2", "3"]
    assert command.parse_gpus("1,0") == ["3", "2"]
    assert [slot.env for slot in pool.gpu_slots(command.parse_gpus("1"))] == [{"CUDA_VISIBLE_DEVICES": "3"}]
    for gpus, says in (("2", "no GPU 2 among the 2"), ("", "distinct indices"), ("0,0", "distinct indices")):
        assert cli.main(["tune", SPEC, "--root", str(tmp_path / "root"), "--gpus", gpus]) == 2, gpus
        assert says in capsys.readouterr().err
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cli.main(["tune", SPEC, "--root", str(tmp_path / "root"), "--gpus", "0"]) == 2
    assert "no GPU is visible" in capsys.readouterr().err
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize(
    # the argparse call as a script meant for another command line would meet tune's own arguments
    "code",
    ["sys.exit(0)", "sys.exit('no GPU here')", "argparse.ArgumentParser().parse_args(['--root'])"],
)
def test_a_spec_that_exits_while_loading_fails_the_run(capsys, tmp_path, code):
    """sys.exit() while a SPEC loads (a script's argparse at import) ended tune with its status, 0
    included: nothing tuned, no error, and a pipeline took the run for a success."""
    spec = tmp_path / "exiting_spec.py"
    spec.write_text(f"import argparse, sys\n{code}\nCASES = []\n")
    assert cli.main(["tune", str(spec), "--root", str(tmp_path / "root")]) == 1
    assert f"cannot load {spec}: SystemExit" in capsys.readouterr().err
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("bad", ["args=5", "kwargs=[1, 2]", "kwargs=7"])
def test_a_case_with_bad_arguments_is_reported_by_its_name(capsys, tmp_path, bad):
    # a bad args/kwargs gave "cannot load SPEC: TypeError: 'int' object is not iterable", naming
    # no case: in a SPEC of hundreds of generated cases the user could not tell which one
    spec = tmp_path / "spec.py"
    spec.write_text(
        "import triton_dejavu_like as tdl\n"
        f"CASES = [tdl.TuneCase('ok', print), tdl.TuneCase('matmul-7', print, {bad})]\n"
    )
    assert cli.main(["tune", str(spec), "--root", str(tmp_path / "root")]) == 1
    err = capsys.readouterr().err
    assert "case 'matmul-7'" in err and "Traceback" not in err


@pytest.mark.slow
def test_workers_a_killed_worker_loses_only_its_case_and_a_rerun_completes_it(capsys, tmp_path, monkeypatch):
    root = tmp_path / "root"
    marker = tmp_path / "crash"
    marker.touch()
    monkeypatch.setenv("TDL_TEST_CRASH_MARKER", str(marker))
    status, first = tune(capsys, f"{SPEC}:cases_with_crash", "--root", str(root), "--workers", "2")
    assert status == 1
    assert statuses(first) == {**{f"add-{n}": "tuned" for n in SIZES}, "crash": "lost"}
    crash = next(c for c in first["cases"] if c["name"] == "crash")
    assert "exited with status 3" in crash["error"]
    assert len({c["worker"] for c in first["cases"]}) == 2  # both workers took cases
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == sorted(SIZES)

    marker.unlink()
    status, second = tune(capsys, f"{SPEC}:cases_with_crash", "--root", str(root), "--workers", "2")
    assert status == 0
    assert statuses(second) == {**{f"add-{n}": "stored" for n in SIZES}, "crash": "tuned"}
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == sorted([*SIZES, 3000])


def test_workers_run_cases_whose_names_hold_spaces_and_line_breaks(capsys, tmp_path):
    # names went to a worker process one a line, stripped: a name with a trailing space or a line
    # break was not found there, the worker stopped and every case after it was reported lost
    names = (" padded ", "two\nlines", "cr\rhere", "plain")
    spec = tmp_path / "spec.py"
    spec.write_text(
        "import triton_dejavu_like as tdl\n"
        "def nothing():\n    pass\n"
        f"CASES = [tdl.TuneCase(name, nothing) for name in {names!r}]\n"
    )
    status, report = tune(capsys, str(spec), "--root", str(tmp_path / "root"), "--workers", "1")
    assert statuses(report) == dict.fromkeys(names, "stored")
    assert status == 0 and not report["errors"]


def test_a_warning_of_several_workers_is_printed_once_by_the_command(capfd, tmp_path, monkeypatch):
    """Every worker printed its own copies of a warning they share (Python's display and the logger's
    last-resort line): the workers send them to the command, which prints each once, as its own."""
    monkeypatch.setenv("TRITON_DEJAVU_COMPILE_THREADS", "-3")  # read by each worker as it tunes
    spec = tmp_path / "spec.py"
    spec.write_text(
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import aot_cases, triton_dejavu_like as tdl\n"
        "from kernels import add_kernel, block_configs\n"
        "SEEDED = tdl.autotune(key=['n'], configs=block_configs(), search_seed=3)(add_kernel)  # a warning\n"
        "CASES = aot_cases.cases()\n"
    )
    with pytest.warns(tdl.DejavuConfigWarning) as shown:  # issued by the command, with its class
        status = cli.main(["tune", str(spec), "--root", str(tmp_path / "root"), "--workers", "2"])
    err = capfd.readouterr().err
    assert status == 0, err
    assert any("TRITON_DEJAVU_COMPILE_THREADS='-3' is not valid" in str(w.message) for w in shown)
    assert err.count("TRITON_DEJAVU_COMPILE_THREADS='-3' is not valid") == 1, err
    assert err.count("search_seed has no effect without use_random_search") == 1, err


@pytest.mark.slow
def test_an_interrupted_worker_run_keeps_what_the_running_cases_stored(tmp_path):
    # Ctrl-C (here: raised where the driver reports a result) while a case was half done: the keys
    # it had already tuned lay in its worker's temporary root, which was deleted unmerged
    from triton_dejavu_like.tools.aot import pool

    stored_marker = tmp_path / "first-key-stored"
    spec = tmp_path / "spec.py"
    spec.write_text(
        f"import sys, time; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from pathlib import Path\n"
        "import aot_cases, triton_dejavu_like as tdl\n"
        f"MARKER = Path({str(stored_marker)!r})\n"
        "def half_done():\n"
        "    aot_cases.add(16)\n"
        "    MARKER.touch()\n"
        "    time.sleep(120)  # the second key, never reached\n"
        "def other():\n"
        "    while not MARKER.exists():\n"
        "        time.sleep(0.05)\n"
        "CASES = [tdl.TuneCase('half-done', half_done), tdl.TuneCase('other', other)]\n"
    )

    def interrupt(result):
        raise KeyboardInterrupt

    target = tmp_path / "root"
    target.mkdir()
    workers = pool.WorkerPool(str(spec), pool.cpu_slots(2), target, interrupt)
    with pytest.raises(KeyboardInterrupt):
        workers.run(["half-done", "other"])
    assert [e.key[0] for e in stored(target).get("add_kernel", [])] == [16]


def test_workers_started_before_one_that_cannot_start_are_stopped(tmp_path, monkeypatch):
    """A worker that cannot be started (here its folder cannot be seeded: a full disk) stops the run;
    the workers already started are stopped too, not left running on a removed folder."""
    seed = pool.merging.seed
    started: list[Path] = []

    def seed_then_fail(root, known):
        if started:
            raise OSError(errno.ENOSPC, "No space left on device")
        started.append(root)
        seed(root, known)

    monkeypatch.setattr(pool.merging, "seed", seed_then_fail)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    workers = pool.WorkerPool(SPEC, pool.cpu_slots(2), tmp_path / "root", lambda result: None)
    (tmp_path / "root").mkdir()
    with pytest.raises(OSError, match="No space left"):
        workers.run(["cases"])
    [pid] = workers.pids
    with pytest.raises(ChildProcessError):  # already reaped by the pool: not left running
        os.waitpid(pid, os.WNOHANG)
    assert not list(tmp_path.glob("tdl-tune-*"))


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["sigterm", "ctrl-c-in-a-terminal"])
def test_sigterm_stops_a_worker_run_as_ctrl_c_does(tmp_path, stop):
    """``kill``, ``timeout`` and batch schedulers send SIGTERM: the command merges what the running
    cases stored, removes the workers' folders and exits 130, as for Ctrl-C (it used to die at once,
    leaving both behind). Ctrl-C in a terminal interrupts the whole process group: the workers leave
    quietly, the command alone says so (each worker printed a traceback)."""
    marker = tmp_path / "first-key-stored"
    spec = tmp_path / "spec.py"
    spec.write_text(
        f"import sys, time; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from pathlib import Path\n"
        "import aot_cases, triton_dejavu_like as tdl\n"
        f"MARKER = Path({str(marker)!r})\n"
        "def half_done():\n"
        "    aot_cases.add(16)\n"
        "    MARKER.touch()\n"
        "    time.sleep(120)\n"
        "def other():\n"
        "    Path(str(MARKER) + '-other').touch()\n"
        "    time.sleep(120)\n"
        "CASES = [tdl.TuneCase('half-done', half_done), tdl.TuneCase('other', other)]\n"
    )
    # both workers past their start: an import that Ctrl-C interrupts prints Python's own traceback,
    # before the worker's code runs
    running = [marker, Path(f"{marker}-other")]
    temp, root = tmp_path / "tmp", tmp_path / "root"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "TRITON_INTERPRET": "1", "TRITON_DEJAVU_PROGRESS": "0"}
    argv = [
        sys.executable,
        "-m",
        "triton_dejavu_like",
        "tune",
        str(spec),
        "--root",
        str(root),
        "--workers",
        "2",
    ]
    # as from a terminal: a process started with SIGINT ignored (a background job of a shell without
    # job control, such as a CI script's) keeps it ignored, and its children too
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        deadline = time.monotonic() + 120
        while not all(p.exists() for p in running) and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert all(p.exists() for p in running), process.communicate(timeout=30)
        if stop == "sigterm":
            process.send_signal(signal.SIGTERM)
        else:
            os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err, err
    assert [e.key[0] for e in stored(root)["add_kernel"]] == [16]
    assert not list(temp.glob("tdl-tune-*"))


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc to see the import")
def test_a_worker_interrupted_while_importing_leaves_quietly(tmp_path):
    """Ctrl-C in a terminal also reaches a worker still importing torch and triton (its first
    seconds): it exits 130 without a traceback, as it does once its own code runs."""
    read_end, write_end = os.pipe()
    argv = pool.worker_argv(["--spec", SPEC, "--root", str(tmp_path), "--fd", str(write_end), "--name", "w"])
    env = {**os.environ, "PYTHONPATH": pool.worker_pythonpath(os.environ.get("PYTHONPATH", ""))}
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # see the test above
    try:
        process = subprocess.Popen(
            argv, env=env, stdin=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(write_end,), text=True
        )
    finally:
        signal.signal(signal.SIGINT, previous)
        os.close(write_end)
    try:
        maps, deadline = Path(f"/proc/{process.pid}/maps"), time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline and "torch" not in maps.read_text():
            time.sleep(0.005)  # until torch's libraries are loaded: the package's import is under way
        assert process.poll() is None, "the worker ended before it was interrupted"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
        os.close(read_end)
    assert process.returncode == 130 and "Traceback" not in err, (process.returncode, err)


@pytest.mark.parametrize(
    ("extra", "unbuffered"), [([], None), (["--workers", "2"], "1")], ids=["in process", "workers"]
)
def test_a_closed_output_stops_no_tuning(tmp_path, extra, unbuffered):
    """``tune SPEC | head`` stopped at the first progress line it could not write: 2 of 6 cases tuned,
    exit 1, nothing said. Buffered, the closed pipe is met at the end; unbuffered, at the first line."""
    root, err = tmp_path / "root", tmp_path / "err"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update({"PYTHONUNBUFFERED": unbuffered} if unbuffered else {})
    command = (
        f"{sys.executable} -m triton_dejavu_like tune {SPEC} --root {root} {' '.join(extra)} 2>{err} | true; "
        'echo "status ${PIPESTATUS[0]}"'
    )
    repo = Path(__file__).parent.parent  # python -m finds this package there first
    result = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env=env, cwd=repo, timeout=300
    )
    assert result.stdout.strip() == "status 0", err.read_text()
    assert err.read_text() == "triton-dejavu-like tune: the output was closed; going on without it\n"
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == sorted(SIZES)


def test_export_to_an_archive_or_refused_before_tuning(capsys, tmp_path):
    root, archive = tmp_path / "root", tmp_path / "ship.tar.gz"
    status, report = tune(capsys, f"{SPEC}:cases", "--root", str(root), "--export", str(archive))
    assert status == 0 and archive.is_file() and len(report["exported"]) == 1
    fresh = tmp_path / "fresh"
    assert cli.main(["merge", str(archive), "--root", str(fresh)]) == 0
    capsys.readouterr()
    status, served = tune(capsys, f"{SPEC}:cases", "--root", str(fresh))
    assert status == 0 and set(statuses(served).values()) == {"stored"}
    # one that exists, one of another kind, a folder inside the root (its files read as the root's), a
    # file that is no folder (the export into it failed, after the tuning)
    (tmp_path / "notes.txt").write_text("a file\n")
    for refused in (archive, tmp_path / "ship.tar", tmp_path / "r2" / "ship", tmp_path / "notes.txt"):
        assert (
            cli.main(["tune", f"{SPEC}:cases", "--root", str(tmp_path / "r2"), "--export", str(refused)]) == 2
        )
        assert "--export" in capsys.readouterr().err
    assert not (tmp_path / "r2").exists() and not (tmp_path / "ship.tar").exists()


def test_export_into_a_folder_ships_the_results_the_cases_used_over_what_it_held(capsys, tmp_path):
    """A folder holding a newer result of a case's key kept it (merged preferring the newest): the
    export shipped a config the run never chose."""
    root, ship = tmp_path / "root", tmp_path / "ship"
    assert tune(capsys, f"{SPEC}:cases", "--root", str(root), "--export", str(ship))[0] == 0
    [held] = inventory.read_sources([ship])[0]
    kid, entry = sorted(held.entries.items())[0]
    newer = {**entry.to_json(), "tuned_at": "2040-01-01T00:00:00+00:00"}
    other = 64 if entry.config.kwargs["BLOCK"] != 64 else 16
    newer["config"] = {**newer["config"], "kwargs": {"BLOCK": other}}
    document = json.loads(Path(held.source).read_bytes())
    document["entries"][kid] = newer
    Path(held.source).write_text(json.dumps(document))
    status, report = tune(capsys, f"{SPEC}:cases", "--root", str(root), "--export", str(ship))
    assert status == 0 and set(statuses(report).values()) == {"stored"}
    shipped = {e.key[0]: e.config.kwargs["BLOCK"] for e in stored(ship)["add_kernel"]}
    assert shipped == {n: best_block(n) for n in SIZES}


def test_export_into_a_folder_inside_a_layer_is_refused_before_tuning(capsys, tmp_path):
    """Only the written root was checked: the export went into the layer, whose next list, export or
    merge read its files twice."""
    layer = tmp_path / "layer"
    layer.mkdir()
    roots = os.pathsep.join([str(tmp_path / "rw"), str(layer)])
    assert cli.main(["tune", f"{SPEC}:cases", "--root", roots, "--export", str(layer / "ship")]) == 2
    assert f"--export {layer / 'ship'} is inside {layer}, the root read" in capsys.readouterr().err
    assert list(layer.iterdir()) == [] and not (tmp_path / "rw").exists()


def test_export_writes_no_empty_archive_when_no_case_stored_anything(capsys, tmp_path):
    """Every case failed: an empty archive was left behind (could be shipped by mistake) and refused
    the export of the run after the SPEC was mended."""
    spec, archive = tmp_path / "spec.py", tmp_path / "ship.tar.gz"
    spec.write_text(
        "import triton_dejavu_like as tdl\n"
        "def boom():\n    raise RuntimeError('bad')\n"
        "CASES = [tdl.TuneCase('boom', boom)]\n"
    )
    status, report = tune(capsys, str(spec), "--root", str(tmp_path / "root"), "--export", str(archive))
    assert status == 1 and not archive.exists() and report["exported"] == []
    assert "nothing exported" in report["not_exported"]
    status, report = tune(capsys, f"{SPEC}:cases", "--root", str(tmp_path / "root"), "--export", str(archive))
    assert status == 0 and archive.is_file() and len(report["exported"]) == 1


def test_an_export_beside_read_only_layers_says_it_holds_only_what_the_root_stores(tmp_path):
    """tune --root local:team --export ship wrote only local's keys, with "exported 1 cache file(s)":
    a team shipping it in place of team served every key team held by the nearest key instead."""
    local, team, ship = tmp_path / "local", tmp_path / "team", tmp_path / "ship"
    spec = tmp_path / "spec.py"  # aot_cases imported by its own name in every run (one storage identity)
    spec.write_text(
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import aot_cases, triton_dejavu_like as tdl\n"
        "def first():\n    return aot_cases.cases()\n"
        "def more():\n    return [*aot_cases.cases(), tdl.TuneCase('add-3000', aot_cases.add, (3000,))]\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "TRITON_INTERPRET": "1"}

    def tune_in_a_process(*argv: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "triton_dejavu_like", "tune", *argv]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)

    assert tune_in_a_process(f"{spec}:first", "--root", str(team)).returncode == 0
    roots = os.pathsep.join([str(local), str(team)])
    done = tune_in_a_process(f"{spec}:more", "--root", roots, "--export", str(ship), "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0 and statuses(report)["add-3000"] == "tuned" and len(report["exported"]) == 1
    assert [e.key[0] for e in stored(ship)["add_kernel"]] == [3000]  # team's keys stay in team
    note = report["export_note"]
    assert str(team) in note and f"export OUT --root {roots}" in note
    done = tune_in_a_process(f"{spec}:more", "--root", roots, "--export", str(tmp_path / "ship2"))
    assert done.returncode == 0 and note.replace(str(ship), str(tmp_path / "ship2")) in done.stdout
    # without layers, the export is all there is: nothing to add
    done = tune_in_a_process(
        f"{spec}:more", "--root", str(team), "--export", str(tmp_path / "ship3"), "--json"
    )
    assert done.returncode == 0 and json.loads(done.stdout)["export_note"] is None


@pytest.mark.parametrize("workers", [[], ["--workers", "1"]])
def test_a_kernel_launched_while_the_spec_loads_stores_into_the_root(capsys, tmp_path, monkeypatch, workers):
    """A SPEC that launched a kernel at import (a quick check) opened its store in
    TRITON_DEJAVU_STORAGE before the cases ran: every case tuned into that root, --root stayed
    empty, and --export wrote nothing."""
    spec, root, ship = tmp_path / "spec.py", tmp_path / "root", tmp_path / "ship"
    tests = str(Path(__file__).parent)  # for the workers to import the SPEC's kernels
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
    spec.write_text(
        "import triton_dejavu_like as tdl\n"
        "from kernels import add_kernel, block_configs, run_add\n"
        "ADD = tdl.autotune(key=['n'], configs=block_configs((16, 32)))(add_kernel)\n"
        "run_add(ADD, 5)\n"
        "CASES = [tdl.TuneCase(f'add-{n}', run_add, (ADD, n)) for n in (11, 13)]\n"
    )
    status, report = tune(capsys, str(spec), "--root", str(root), "--export", str(ship), *workers)
    assert status == 0 and statuses(report) == {"add-11": "tuned", "add-13": "tuned"}
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == [5, 11, 13]
    assert sorted(e.key[0] for e in stored(ship)["add_kernel"]) == [5, 11, 13]
    environment = Path(os.environ["TRITON_DEJAVU_STORAGE"])
    assert not environment.exists() or stored(environment) == {}


def test_export_writes_only_the_spec_kernels(capsys, tmp_path):
    root, out = tmp_path / "root", tmp_path / "ship"
    assert tune(capsys, f"{SPEC}:cases", "--root", str(root))[0] == 0
    other = tmp_path / "other.py"
    other.write_text(
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import kernels, triton_dejavu_like as tdl\n"
        "SCALE = tdl.autotune(key=['n'], configs=kernels.block_configs())(kernels.scale_kernel)\n"
        "def go():\n    import torch\n    x = torch.ones(64); o = torch.empty(64)\n"
        "    SCALE[kernels.grid(64)](x, o, 64, 2.0)\n"
        "CASES = [tdl.TuneCase('scale', go)]\n"
    )
    assert tune(capsys, str(other), "--root", str(root))[0] == 0
    assert set(stored(root)) == {"add_kernel", "scale_kernel"}

    status, report = tune(capsys, f"{SPEC}:cases", "--root", str(root), "--export", str(out))
    assert status == 0 and len(report["exported"]) == 1
    shipped = stored(out)
    assert set(shipped) == {"add_kernel"} and len(shipped["add_kernel"]) == len(SIZES)
    # the export is a storage root: a serving process restores from it without tuning
    status, served = tune(capsys, f"{SPEC}:cases", "--root", str(out))
    assert status == 0 and set(statuses(served).values()) == {"stored"}


def test_a_key_tuned_into_a_custom_data_storage_is_reported(tmp_path):
    """A kernel with custom_data_storage stores outside the root 'tune' merges and exports (with
    Ray, on the worker's machine): said, not dropped in silence."""
    from kernels import FakeBench, run_add, tuned_add

    from triton_dejavu_like.tools.aot.run import run_case

    tuner = tuned_add(FakeBench(), custom_data_storage=tmp_path / "custom")
    case = tdl.TuneCase("custom", lambda: run_add(tuner, 64))
    with pytest.warns(tdl.DejavuStorageWarning, match="its custom_data_storage.*neither merges nor exports"):
        result = run_case(case, tmp_path / "root")
    assert (result.status, result.files) == ("tuned", [])
    assert tuner.cache_path().is_relative_to(tmp_path / "custom")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"heuristic_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("method", ["tree", "nearest"])
def test_heuristic_from_a_store_gives_the_stored_configs(capsys, tmp_path, monkeypatch, method):
    if method == "tree":
        pytest.importorskip("sklearn")
    root = tmp_path / "root"
    assert tune(capsys, f"{SPEC}:cases", "--root", str(root))[0] == 0
    out = tmp_path / f"h_{method}.py"
    argv = ["heuristic", "add_kernel", "--root", str(root), "--out", str(out), "--method", method]
    assert cli.main(argv) == 0
    message = capsys.readouterr().out
    assert f"{method} over 6 stored keys" in message and "(leave-one-out)" in message
    source = out.read_text()
    assert "pickle" not in source and "Config({'BLOCK':" in source
    heuristic = _load(out).heuristic
    for entry in stored(root)["add_kernel"]:
        assert heuristic(entry.key).kwargs == entry.config.kwargs

    # used as fallback_heuristic: a fresh tuner with forced fallback launches with its configs
    import aot_cases
    from kernels import add_kernel, block_configs, run_add

    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", str(tmp_path / "empty"))
    tuner = tdl.autotune(key=["n"], configs=block_configs(), fallback_heuristic=heuristic)(add_kernel)
    for n in aot_cases.SIZES:
        run_add(tuner, n)
        assert tuner.last_decision == "heuristic"
        assert tuner.best_config.kwargs["BLOCK"] == best_block(n)


def test_heuristic_never_replaces_an_existing_file_without_force(capsys, tmp_path):
    root = tmp_path / "root"
    assert tune(capsys, f"{SPEC}:cases", "--root", str(root))[0] == 0
    mine = tmp_path / "mine.py"
    mine.write_text("precious = 1\n")
    argv = ["heuristic", "add_kernel", "--root", str(root), "--out", str(mine), "--method", "nearest"]
    assert cli.main(argv) == 2
    assert "already exists; nothing was written" in capsys.readouterr().err
    assert mine.read_text() == "precious = 1\n"
    assert cli.main([*argv, "--force"]) == 0
    assert "def heuristic(" in mine.read_text()


def test_tune_fails_a_case_whose_results_could_not_be_stored(capsys, tmp_path):
    """The storage cannot be written (a file stands where a folder must be): the keys are tuned, but
    kept in memory only, so the case fails and the run exits 1 instead of saying "tuned"."""
    root = tmp_path / "root"
    root.mkdir()
    (root / layout.component("dejavu", identity.package_major_minor())).write_text("in the way")
    with pytest.warns(DejavuStorageWarning):
        status, report = tune(capsys, SPEC, "--root", str(root))
    assert status == 1 and not report["ok"]
    assert set(statuses(report).values()) == {"failed"}
    assert all("tuned but not stored" in case["error"] for case in report["cases"])


def test_tune_with_workers_fails_a_case_whose_results_could_not_be_merged(capsys, tmp_path, monkeypatch):
    """The same with --workers: the cases were reported "tuned", the merge error was printed once per
    case and once more at the end, and the workers' stores, the only copy of the results, were
    deleted. Now each case fails, the error is listed once, and the results are kept for a merge."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the workers' stores go
    root, blocker = blocked_root(tmp_path)
    status, report = tune(capsys, f"{SPEC}:cases", "--root", str(root), "--workers", "2")
    assert status == 1 and not report["ok"]
    check_kept_for_merge(report, root, blocker)


def blocked_root(tmp_path: Path) -> tuple[Path, Path]:
    """A --root into which nothing can be merged: a file where its version folder goes."""
    root = tmp_path / "root"
    root.mkdir()
    blocker = root / layout.component("dejavu", identity.package_major_minor())
    blocker.write_text("in the way")
    return root, blocker


def check_kept_for_merge(report: dict, root: Path, blocker: Path) -> None:
    """Every case failed "tuned but not merged", the problem is listed once, and the merge command
    the error gives stores every key once the root can be written."""
    assert set(statuses(report).values()) == {"failed"}
    assert all("tuned but not merged into" in case["error"] for case in report["cases"])
    assert len(report["problems"]) == len({(p["path"], p["reason"]) for p in report["problems"]}) == 1
    [kept] = [e for e in report["errors"] if "are kept in" in e]
    blocker.unlink()
    assert cli.main(kept.split("merge them with python -m triton_dejavu_like ")[1].split()) == 0
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == sorted(SIZES)


def test_heuristic_without_stored_results_fails(capsys, tmp_path):
    (tmp_path / "root").mkdir()
    assert cli.main(["heuristic", "nope", "--root", str(tmp_path / "root")]) == 1
    assert "nothing stored for kernel 'nope'" in capsys.readouterr().err


def test_ray_workers_keep_the_drivers_pythonpath(monkeypatch, tmp_path):
    # Ray's env_vars replace a worker's PYTHONPATH: a Ray installed on the driver's PYTHONPATH (not in
    # site-packages) must stay importable there, or every worker dies at start and the run waits forever
    from triton_dejavu_like.tools.aot.ray_backend import worker_env

    monkeypatch.setenv("PYTHONPATH", f"/opt/site-a{os.pathsep}/opt/site-b")
    monkeypatch.chdir(tmp_path)
    path = worker_env()["PYTHONPATH"].split(os.pathsep)
    assert path[-2:] == ["/opt/site-a", "/opt/site-b"]
    assert str(tmp_path) in path  # the SPEC's directory
    assert Path(tdl.__file__).resolve().parents[1] in [Path(p).resolve() for p in path]


def test_a_worker_is_seeded_with_what_the_tuner_sees_through_directory_links(tmp_path):
    """A store whose kernel directory is a link to another disk: the results under it are stored
    results (the tuner reads and writes through the link), so a worker is seeded with them and
    does not tune them again."""
    from triton_dejavu_like.tools.aot import merging

    elsewhere = tmp_path / "other-disk" / "kernel_a"
    elsewhere.mkdir(parents=True)
    (elsewhere / "cache.json").write_bytes(b'{"linked": true}')
    root = tmp_path / "root"
    (root / "kernel_b").mkdir(parents=True)
    (root / "kernel_b" / "cache.json").write_bytes(b'{"plain": true}')
    (root / "kernel_a").symlink_to(elsewhere, target_is_directory=True)
    (root / "loop").symlink_to(root, target_is_directory=True)  # walked once, not forever
    files = merging.read_tree(root)
    assert files == {"kernel_a/cache.json": b'{"linked": true}', "kernel_b/cache.json": b'{"plain": true}'}
    worker_root = tmp_path / "worker"
    merging.seed(worker_root, files)
    assert (worker_root / "kernel_a" / "cache.json").read_bytes() == b'{"linked": true}'


def entries_of(winners: dict[tuple, int]) -> list[StoredEntry]:
    """Stored entries: each key's winning BLOCK."""
    return [StoredEntry.from_json(key_id(key), make_entry(key, block=b)) for key, b in winners.items()]


SMALL_AND_LARGE = {(64,): 16, (4096,): 256}


def generated(entries: list[StoredEntry], method: str, name: str = "heuristic"):
    """The function of the heuristic module learnt from ``entries``."""
    source = heuristic.learn(entries, "k", method=method, name=name).source
    namespace: dict = {}
    exec(compile(source, "generated", "exec"), namespace)
    return namespace[name]


def test_a_stored_kernel_name_cannot_add_code_to_a_generated_heuristic():
    # the module is Python that users import: a kernel name read from a stored file (another
    # machine's, merged) is data, and must stay inside the docstrings it is quoted in
    import ast

    name = 'k"""\nimport os; os.system("echo owned")\n"""\\'
    tree = ast.parse(heuristic.learn(entries_of(SMALL_AND_LARGE), name, method="nearest").source)
    statements = {type(node).__name__ for node in tree.body}
    assert statements <= {"Expr", "Import", "ImportFrom", "Assign", "FunctionDef"}
    assert [isinstance(node, ast.Expr) for node in tree.body].count(True) == 1  # the docstring
    imported = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    assert imported == {"math"}
    assert repr(name) in ast.get_docstring(tree)  # shown as it is stored


@pytest.mark.parametrize("method", ["tree", "nearest"])
@pytest.mark.parametrize(
    "name", ["class", "None", "CONFIGS", "CATEGORICAL", "TABLE", "CODES", "math", "_nearest"]
)
def test_a_heuristic_function_name_never_breaks_the_generated_module(method, name):
    # --name was only checked with str.isidentifier(): a keyword gave a module that does not
    # compile, a name the module defines itself (CONFIGS, _nearest, ...) one that fails when called
    if method == "tree":
        pytest.importorskip("sklearn")
    try:
        function = generated(entries_of(SMALL_AND_LARGE), method, name)
    except heuristic.HeuristicError as exc:
        assert repr(name) in str(exc)
        return
    assert function((100,)).kwargs["BLOCK"] == 16  # the stored key nearer 100


def test_heuristic_name_that_is_no_function_name_is_a_usage_error(capsys, tmp_path):
    """A bad --name exited 1 after reading the store, where a bad option value exits 2."""
    with pytest.raises(SystemExit) as refused:
        cli.main(["heuristic", "add_kernel", "--root", str(tmp_path), "--name", "bad name"])
    assert refused.value.code == 2 and "not a Python function name: 'bad name'" in capsys.readouterr().err


def test_tune_into_a_root_that_is_a_file_is_refused_before_tuning(capsys, tmp_path, monkeypatch):
    """It failed after loading the SPEC with only "[Errno 17] File exists"."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert cli.main(["tune", SPEC, "--root", str(afile)]) == 2
    assert f"--root {afile} is not a folder" in capsys.readouterr().err
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", str(afile))
    assert cli.main(["tune", SPEC]) == 1
    assert f"the storage root (from TRITON_DEJAVU_STORAGE or the default) {afile} is not a folder" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("method", ["tree", "nearest"])
def test_a_heuristic_answers_from_the_stored_keys_of_the_same_dtype(method):
    """Another dtype is another kernel in effect: a key is answered from stored keys of its dtype,
    however near in size a key of another dtype is."""
    if method == "tree":
        pytest.importorskip("sklearn")
    f16, f32 = "torch.float16", "torch.float32"
    function = generated(
        entries_of({(64, f16): 16, (4096, f16): 16, (64, f32): 256, (4096, f32): 256}), method
    )
    for n in (100, 3000):
        assert function((n, f16)).kwargs["BLOCK"] == 16
        assert function((n, f32)).kwargs["BLOCK"] == 256


@pytest.mark.parametrize("method", ["tree", "nearest"])
def test_a_heuristic_answers_a_key_with_no_number_where_the_stored_keys_had_one(method):
    """An optional key argument passed as None: a config of the kernel's, not a TypeError."""
    if method == "tree":
        pytest.importorskip("sklearn")
    f16, f32 = "torch.float16", "torch.float32"
    function = generated(entries_of({(64, f32): 16, (4096, f32): 256}), method)
    assert function((None, f32)).kwargs["BLOCK"] in (16, 256)
    assert function(("many", f32)).kwargs["BLOCK"] in (16, 256)
    # the rest of the key still counts: the dtype (a None size made every distance NaN, so the
    # table's first key won, here one of the other dtype)
    function = generated(
        entries_of({(4096, f16): 16, (64, f16): 16, (64, f32): 256, (4096, f32): 256}), method
    )
    assert [function((None, dtype)).kwargs["BLOCK"] for dtype in (f16, f32)] == [16, 256]


@settings(max_examples=150, deadline=None)
@given(
    winners=st.dictionaries(
        st.tuples(st.integers(0, 40), st.integers(0, 40), st.sampled_from(["torch.float16", "torch.int8"])),
        st.sampled_from([16, 32, 64]),
        min_size=1,
        max_size=12,
    ),
    query=st.tuples(st.integers(0, 40), st.integers(0, 40)),
)
def test_a_nearest_heuristic_answers_as_the_tuners_nearest_key(winners, query):
    """Whatever the order of the entries it learns from, the table answers as the tuner's nearest key
    (of the same dtype, where both answer from the nearest stored key), ties included."""
    from triton_dejavu_like.tuner.nearest import KeyIndex

    entries = entries_of(winners)
    function = generated(list(reversed(entries)), "nearest")  # in any order
    for dtype in {key[-1] for key in winners}:
        key = (*query, dtype)
        chosen = KeyIndex(entries).nearest(key, {e.config_id for e in entries})
        assert function(key).kwargs == chosen.config.kwargs


def test_a_tie_in_a_nearest_heuristic_goes_to_the_smaller_key_id_as_in_the_tuner():
    """The table was in the order of the keys' repr, so of two stored keys at the same distance it
    took (1,) where the tuner takes (17,), whose key id "[17]" sorts first."""
    from triton_dejavu_like.tuner.nearest import distance

    entries = entries_of({(1,): 16, (17,): 256})
    assert distance((5,), (1,)) == distance((5,), (17,))
    for order in (entries, entries[::-1]):
        assert generated(order, "nearest")((5,)).kwargs["BLOCK"] == 256


def test_a_nearest_heuristic_compares_flags_as_the_tuner_does():
    """A bool key value (a flag) was a number, 0 or 1, so the table answered from a key with the other
    flag when its sizes were nearer, where the tuner's nearest key compares keys of the same flag only
    (and the docs say another category outweighs any numeric distance)."""
    from triton_dejavu_like.tuner.nearest import KeyIndex

    entries = entries_of({(True, 1024): 16, (False, 64): 256})
    tuner_choice = KeyIndex(entries).nearest((True, 64), {e.config_id for e in entries})
    assert tuner_choice.key == (True, 1024)
    function = generated(entries, "nearest")
    assert function((True, 64)).kwargs["BLOCK"] == 16
    assert function((False, 2048)).kwargs["BLOCK"] == 256
    assert function((1, 64)).kwargs["BLOCK"] in (16, 256)  # not a flag: still a config


@pytest.mark.parametrize("method", ["tree", "nearest"])
def test_a_heuristic_learns_from_and_answers_ints_too_large_for_a_float(method):
    """An int past the float range in a stored key made the command fail with OverflowError (a
    traceback), and in a key given to a generated heuristic made it raise."""
    if method == "tree":
        pytest.importorskip("sklearn")
    huge = 10**400
    winners = {(huge, "f"): 16, (64, "f"): 32, (64, "g"): 256}
    function = generated(entries_of(winners), method)
    assert {key: function(key).kwargs["BLOCK"] for key in winners} == winners
    function = generated(entries_of(SMALL_AND_LARGE), method)
    assert function((huge,)).kwargs["BLOCK"] in (16, 256)
    assert function((-huge,)).kwargs["BLOCK"] in (16, 256)


def test_tune_tunes_in_a_read_only_environment(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")  # a serving image's environment
    root = tmp_path / "root"
    status, report = tune(capsys, SPEC, "--root", str(root))
    assert status == 0 and statuses(report) == {f"add-{n}": "tuned" for n in SIZES}
    assert sorted(e.key[0] for e in stored(root)["add_kernel"]) == sorted(SIZES)


@pytest.mark.parametrize("variable", ["TRITON_DEJAVU_DETERMINISTIC", "TRITON_DEJAVU_FORCE_FALLBACK"])
def test_tune_refuses_an_environment_where_it_would_not_tune(capsys, tmp_path, monkeypatch, variable):
    # either variable makes a miss answer without tuning (a heuristic, for a kernel that has one):
    # said at once, never reported as "stored"
    monkeypatch.setenv(variable, "1")
    assert cli.main(["tune", SPEC, "--root", str(tmp_path / "other")]) == 2
    assert variable in capsys.readouterr().err and not (tmp_path / "other").exists()


def test_ray_options_without_ray_are_reported(capsys, tmp_path):
    """--batch-size and --ray-start-timeout only shape a Ray run: given without --ray, said once each."""
    with pytest.warns(tdl.DejavuConfigWarning) as shown:
        status, report = tune(
            capsys, SPEC, "--root", str(tmp_path / "root"), "--batch-size", "4", "--ray-start-timeout", "5"
        )
    assert status == 0 and set(statuses(report).values()) == {"tuned"}
    said = sorted(str(w.message) for w in shown if "without --ray" in str(w.message))
    assert said == [
        "tune: --batch-size has no effect without --ray",
        "tune: --ray-start-timeout has no effect without --ray",
    ]


def test_a_heuristic_learnt_from_many_keys_imports_and_answers():
    """Winners that change with every key (a periodic pattern over 300 sizes) grew a tree 299 levels
    deep: the generated module failed to import (Python refuses 100 levels of indentation), yet the
    command reported success."""
    pytest.importorskip("sklearn")
    blocks = (16, 32, 64, 128, 256)
    entries = entries_of({(n,): blocks[n % 5] for n in range(1, 301)})
    learnt = heuristic.learn(entries, "k", method="tree")
    function = generated(entries, "tree")
    assert all(function(e.key).kwargs["BLOCK"] in blocks for e in entries)
    depth = max(len(line) - len(line.lstrip(" ")) for line in learnt.source.splitlines()) // 4
    assert depth <= heuristic.MAX_TREE_DEPTH + 2  # the function's body, then one level a split


def test_a_heuristic_tests_a_bounded_number_of_held_out_keys(monkeypatch):
    """Validating a nearest-key table on every held-out key of a file of 10,000 took 81 s."""
    monkeypatch.setattr(heuristic, "MAX_TESTED", 40)
    entries = entries_of({(n,): 16 if n < 150 else 256 for n in range(1, 301)})
    learnt = heuristic.learn(entries, "k", method="nearest")
    assert learnt.tested == 40 and learnt.validation == "5-fold, 40 of 300 keys tested"
    assert 38 <= learnt.correct <= 40  # only keys next to the boundary may miss
    assert heuristic.learn(entries[:40], "k", method="nearest").validation == "5-fold"


@pytest.mark.parametrize(
    ("spec", "absolute"),
    [
        ("aot_cases.py", "{dir}/aot_cases.py"),
        ("aot_cases.py:cases", "{dir}/aot_cases.py:cases"),
        ("./aot_cases.py:cases_with_crash", "{dir}/aot_cases.py:cases_with_crash"),
        ("aot_cases", "aot_cases"),  # a module: found on the workers' PYTHONPATH
        ("aot_cases:cases", "aot_cases:cases"),
    ],
)
def test_a_spec_sent_to_ray_workers_names_its_file_by_an_absolute_path(monkeypatch, spec, absolute):
    from triton_dejavu_like.tools.aot.case import absolute_spec

    monkeypatch.chdir(Path(SPEC).parent)
    assert absolute_spec(spec) == absolute.format(dir=Path(SPEC).parent)


@pytest.mark.parametrize(
    ("argv", "spec", "address"),
    [
        (["--ray", SPEC], SPEC, None),  # argparse hands SPEC to --ray's optional ADDRESS
        (["--ray", "aot_cases:cases"], "aot_cases:cases", None),
        ([SPEC, "--ray"], SPEC, None),
        ([SPEC, "--ray", "10.0.0.1:6379"], SPEC, "10.0.0.1:6379"),
        (["--ray", "ray://head:10001", SPEC], SPEC, "ray://head:10001"),
        (["--ray", "auto", SPEC], SPEC, "auto"),
    ],
)
def test_tune_ray_before_the_spec_reads_it_as_the_spec(monkeypatch, tmp_path, argv, spec, address):
    """`tune --ray SPEC` had failed with "the following arguments are required: spec"."""
    from triton_dejavu_like.tools.cli import tuning as cli_tuning

    asked = []

    def fake_tune(request, quiet):
        asked.append(request)
        raise tdl.tools.aot.case.SpecError("stop here")

    monkeypatch.setattr(cli_tuning.aot, "tune", fake_tune)
    assert cli.main(["tune", *argv, "--root", str(tmp_path / "root")]) == 1
    assert [(r.spec, r.ray, r.ray_address) for r in asked] == [(spec, True, address)]


@pytest.mark.parametrize("argv", [["--ray", "10.0.0.1:6379"], ["--ray"], []])
def test_tune_without_a_spec_says_so(capsys, tmp_path, argv):
    assert cli.main(["tune", *argv, "--root", str(tmp_path / "root")]) == 2
    assert "name the SPEC" in capsys.readouterr().err


def test_a_ray_actor_restores_what_the_drivers_read_only_layers_hold(monkeypatch, capsys, tmp_path):
    """An actor (run here, without Ray) is sent the driver's layers: it restores their keys instead
    of tuning them again (the driver then left the results out, after the GPU time was spent)."""
    from triton_dejavu_like import _log
    from triton_dejavu_like.tools.aot import merging, ray_backend

    team = tmp_path / "team"
    assert cli.main(["tune", f"{SPEC}:cases", "--root", str(team), "--json"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(_log, "_relay", None)  # the actor relays its warnings from its construction
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", str(tmp_path / "unused"))  # the actor sets its own
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    names = [f"add-{n}" for n in SIZES]

    bare = ray_backend.CaseRunner(f"{SPEC}:cases", {})
    layered = ray_backend.CaseRunner(f"{SPEC}:cases", {}, [{}, merging.read_tree(team)])
    try:
        assert {r["status"] for r in bare.run(names)["results"]} == {"tuned"}
        answer = layered.run(names)
        assert [(r["status"], r["tuned"], r["files"]) for r in answer["results"]] == [("stored", [], [])] * 6
        assert answer["files"] == {}
    finally:
        bare.close()
        layered.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["team"]  # roots and layer copies removed


# --- from the keys serving missed to a SPEC (the recipe of docs/aot.md) -------------------------------------

#: docs/aot.md's recipe, with this test's kernel: the label misses names it by, and how a key's values
#: (n, then the dtypes of x, y and out) become the call that launches it.
MISSES_SPEC = """
import json
import os

import aot_cases

import triton_dejavu_like as tdl
from triton_dejavu_like.codec import decode_key

CALLS = {"kernels.add_kernel": lambda n, *dtypes: aot_cases.add(n)}


def cases():
    with open(os.environ["MISSES_JSON"]) as f:
        misses = json.load(f)["misses"]
    seen = set()
    for miss in misses:
        call, values = CALLS.get(miss["label"]), miss["key_values"]
        if call is None or values is None or (miss["label"], miss["key"]) in seen:
            continue  # another kernel, a key the server could not record, a key answered two ways
        seen.add((miss["label"], miss["key"]))
        yield tdl.TuneCase(f"{miss['label']} {miss['key']}", call, decode_key(values))
"""

SERVE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import aot_cases, triton_dejavu_like as tdl
benchmarks = []
bench = type(aot_cases.BENCH).__call__
type(aot_cases.BENCH).__call__ = lambda self, *a, **k: benchmarks.append(1) or bench(self, *a, **k)
decisions = {}
for n in (16, 300, 700, 300):
    aot_cases.add(n)
    decisions[n] = aot_cases.ADD.last_decision
misses = sum(sum(keys.values()) for keys in tdl.misses().values())
print(json.dumps({"benchmarks": len(benchmarks), "misses": misses, "decisions": decisions}))
"""


def operator_env(**variables: str) -> dict[str, str]:
    """The environment of a process of the operator's loop: the tests' kernels importable."""
    tests = str(Path(__file__).parent)
    pythonpath = os.pathsep.join([tests, pool.worker_pythonpath(os.environ.get("PYTHONPATH", ""))])
    return {**os.environ, "PYTHONPATH": pythonpath, **variables}


def fresh_process(argv: list[str], env: dict[str, str]) -> str:
    """Run ``python argv`` (a process of its own, as each step of the loop is); its output, once it
    exited 0."""
    done = subprocess.run(
        [sys.executable, "-W", "ignore", *argv], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def serve(roots: str, misses: Path) -> dict:
    env = operator_env(
        TRITON_DEJAVU_READ_ONLY="1",
        TRITON_DEJAVU_STORAGE=roots,
        TRITON_DEJAVU_MISSES_FILE=str(misses),
    )
    return json.loads(fresh_process(["-c", SERVE, str(Path(__file__).parent)], env))


def test_the_keys_serving_missed_are_tuned_from_the_misses_json_and_then_restored(capsys, tmp_path):
    """Serve read-only over RW:LAYER with a misses file, `misses --json`, a SPEC that builds its cases
    from the key values, `tune` into the same roots: a new serving process restores every key, with no
    benchmark and no miss. The keys were Python text only (a SPEC had to parse them)."""
    rw, layer, misses = tmp_path / "rw", tmp_path / "layer", tmp_path / "misses.jsonl"
    (tmp_path / "sizes_spec.py").write_text("import aot_cases\nCASES = aot_cases.cases()\n")
    tune_command = ["-m", "triton_dejavu_like", "tune", "--json"]
    fresh_process([*tune_command, str(tmp_path / "sizes_spec.py"), "--root", str(layer)], operator_env())
    roots = os.pathsep.join([str(rw), str(layer)])
    served = serve(roots, misses)  # the layer holds SIZES, not 300 and 700
    assert served["misses"] == 2 and served["decisions"]["16"] == "restored", served

    assert cli.main(["misses", str(misses), "--json"]) == 0
    out = capsys.readouterr().out
    listed = json.loads(out)["misses"]
    assert sorted(m["key_values"] for m in listed) == [[n, *["torch.float32"] * 3] for n in (300, 700)]
    (tmp_path / "misses.json").write_text(out)
    (tmp_path / "misses_spec.py").write_text(MISSES_SPEC)
    env = operator_env(MISSES_JSON=str(tmp_path / "misses.json"))
    report = json.loads(
        fresh_process([*tune_command, str(tmp_path / "misses_spec.py"), "--root", roots], env)
    )
    assert sorted(statuses(report).values()) == ["tuned", "tuned"]
    assert sorted(e.key[0] for e in stored(rw)["add_kernel"]) == [300, 700]  # into RW, never the layer

    again = serve(roots, misses)
    assert again == {"benchmarks": 0, "misses": 0, "decisions": {str(n): "restored" for n in (16, 300, 700)}}
