"""Single-flight tuning: processes that miss one key at once benchmark it once and agree on its config.

End-to-end tests run ``single_flight_worker.py`` in separate Python processes (the interpreter, a
counting ``do_bench`` returning a random time per config, so independent tunings would disagree).
Lease-level tests drive :mod:`triton_dejavu_like.store.lease` directly.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from storage_helpers import (
    AS_ROOT,
    BLOCKS,
    InstantBench,
    deny_opens,
    launch,
    make_tuner,
    stored_entries,
    write_document,
)

import triton_dejavu_like as tdl
from triton_dejavu_like import DejavuTuningWarning
from triton_dejavu_like.codec import key_id
from triton_dejavu_like.store import lease as lease_mod
from triton_dejavu_like.store.layered import forget_stores
from triton_dejavu_like.tuner import single_flight

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals")

WORKER = Path(__file__).parent / "single_flight_worker.py"
TIMEOUT_S = 120
#: A live process other than this one, on this host: the one that started the tests.
LIVE_PID = os.getppid()


def start_worker(root: Path, go: Path, n: int, *extra: str, **env: str) -> subprocess.Popen[str]:
    environ = {**os.environ, "TRITON_DEJAVU_STORAGE": str(root), "TRITON_INTERPRET": "1", **env}
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(go), str(n), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )


def result_of(proc: subprocess.Popen[str]) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1]), err


def wait_for(path: Path, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def leases(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if lease_mod.LEASE_SUFFIX in p.name]


def holder_of(started: Path, procs: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    """The worker that took the lease: the one whose pid ``--started`` wrote once it benchmarked."""
    wait_for(started)
    [holder] = [p for p in procs if p.pid == int(started.read_text())]
    return holder


def waits_for(waiter: subprocess.Popen[str], holder: subprocess.Popen[str]) -> bool:
    """Whether ``waiter`` says it waits for ``holder``'s result (its stderr read up to that line, or to
    its end)."""
    assert waiter.stderr is not None
    return any(f"being tuned by pid {holder.pid} on" in line for line in iter(waiter.stderr.readline, ""))


def test_four_processes_on_one_key_benchmark_once_and_agree(tmp_path):
    root, go, started, release = (tmp_path / name for name in ("store", "go", "started", "release"))
    # the first to benchmark holds the key until each of the others said it waits for it
    options = ("--started", str(started), "--release", str(release))
    procs = [start_worker(root, go, 300, *options) for _ in range(4)]
    try:
        go.touch()
        holder = holder_of(started, procs)
        assert all(waits_for(waiter, holder) for waiter in procs if waiter is not holder)
        release.touch()
        results = [result_of(p)[0] for p in procs]
    finally:
        release.touch()
        for proc in procs:
            if proc.poll() is None:  # a failure above left it running
                proc.kill()
                proc.communicate(timeout=TIMEOUT_S)
    assert sorted(r["benchmarks"] for r in results) == [0, 0, 0, 3]  # one process measured 3 configs
    assert sorted(r["decision"] for r in results) == ["restored"] * 3 + ["tuned"]
    assert len({r["block"] for r in results}) == 1
    assert leases(root) == []


def test_without_single_flight_every_process_tunes(tmp_path):
    root, go = tmp_path / "store", tmp_path / "go"
    meet = tmp_path / "meet"
    meet.mkdir()
    options = ("--meet", str(meet), "--count", "2")  # both are benchmarking at one moment
    procs = [start_worker(root, go, 300, *options, TRITON_DEJAVU_SINGLE_FLIGHT="0") for _ in range(2)]
    go.touch()
    results = [result_of(p)[0] for p in procs]
    assert [r["benchmarks"] for r in results] == [3, 3]


def test_a_holder_killed_mid_tuning_is_taken_over(tmp_path):
    root, go, started = tmp_path / "store", tmp_path / "go", tmp_path / "started"
    go.touch()
    never = tmp_path / "never-released"
    holder = start_worker(root, go, 400, "--started", str(started), "--release", str(never))
    try:
        assert holder_of(started, [holder]) is holder  # it took the lease and is benchmarking
        assert len(leases(root)) == 1
        waiter = start_worker(root, go, 400)
        assert waits_for(waiter, holder)  # the warning says whom it waits for
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=TIMEOUT_S)  # reaped: a zombie's pid still exists
        result, _ = result_of(waiter)
    finally:
        holder.kill()
        holder.communicate(timeout=TIMEOUT_S)
    assert result["decision"] == "tuned" and result["benchmarks"] == 3
    assert leases(root) == []


def test_a_stopped_holder_is_taken_over_and_warns_when_continued(tmp_path):
    """A holder stopped (SIGSTOP) mid-tuning is alive, but its heartbeat stops: a waiter on its own
    host takes its key over once the heartbeat is older than STALE_AFTER_S (2 s here), tunes and
    records. The holder, continued, warns that it lost the lease (it looks dead to every other
    process, not only to other hosts), finishes tuning, then finds the waiter's result and launches
    it instead of overwriting it (both launch one config), and removes no lease but its own."""
    root, go, started = tmp_path / "store", tmp_path / "go", tmp_path / "started"
    release = tmp_path / "release"
    go.touch()
    holder = start_worker(root, go, 450, "--started", str(started), "--release", str(release), "--stale", "2")
    try:
        assert holder_of(started, [holder]) is holder  # it took the lease and is benchmarking
        holder.send_signal(signal.SIGSTOP)
        waiter, _ = result_of(start_worker(root, go, 450, "--stale", "2"))
        release.touch()
        holder.send_signal(signal.SIGCONT)
        result, err = result_of(holder)
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.communicate(timeout=TIMEOUT_S)
    assert waiter["decision"] == "tuned" and waiter["benchmarks"] == 3
    assert result["decision"] == "restored" and result["benchmarks"] == 3  # tuned, then adopted
    assert "lost the tuning lease" in err and "looks dead to the other processes" in err
    assert leases(root) == []
    (entry,) = stored_entries(next(root.rglob("cache.json"))).values()
    assert entry["config"]["kwargs"]["BLOCK"] == result["block"] == waiter["block"]


def write_lease(path: Path, *, host: str, pid: int, age_s: float, **extra: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"host": host, "pid": pid, "started": time.time() - age_s, "token": "t", "key": "k", **extra}
    path.write_text(json.dumps(data))
    moment = time.time() - age_s
    os.utime(path, (moment, moment))


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=TIMEOUT_S)
    return proc.pid


def lease_of(tuner, n: int) -> Path:
    return lease_mod.lease_path(tuner.cache_path(), key_id((n, "torch.float32", "torch.float32")))


@pytest.mark.parametrize(
    "holder",
    [
        pytest.param({"host": socket.gethostname(), "pid": "dead", "age_s": 0.0}, id="dead pid, this host"),
        pytest.param({"host": "elsewhere", "pid": 1, "age_s": 3600.0}, id="no heartbeat, other host"),
        pytest.param({"host": socket.gethostname(), "pid": 1, "age_s": 0.0}, id="unreadable"),
    ],
)
def test_a_stale_lease_is_taken_over_at_once(tmp_path, holder):
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    path = lease_of(tuner, 50)
    if holder["pid"] == "dead":
        holder = {**holder, "pid": dead_pid()}
    write_lease(path, **holder)
    if holder["pid"] == 1 and holder["host"] != "elsewhere":
        path.write_bytes(b"\x00 not json")  # a holder killed between create and write, long ago
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    start = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuTuningWarning)  # no waiting
        launch(tuner, 50)
    assert tuner.last_decision == "tuned" and bench.calls == 3
    assert time.monotonic() - start < 60  # not the wait timeout (MIN_WAIT_S)
    assert not path.exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="zombies are told apart through /proc")
def test_a_lease_of_a_killed_holder_not_yet_reaped_is_stale(tmp_path):
    """A holder killed while its parent waits for another child first is a zombie until reaped: its
    pid still answers kill(pid, 0), and waiters kept waiting STALE_AFTER_S for its heartbeat to age."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + TIMEOUT_S
        stat = Path(f"/proc/{proc.pid}/stat")
        while b") Z" not in stat.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)  # it ends; nobody reaps it until the finally below
        now = time.time()
        info = lease_mod.LeaseInfo(socket.gethostname(), proc.pid, now, "t", now)
        assert lease_mod.is_stale(info, now=now)
        live = lease_mod.LeaseInfo(socket.gethostname(), LIVE_PID, now, "t", now)
        assert not lease_mod.is_stale(live, now=now)
    finally:
        proc.wait(timeout=TIMEOUT_S)


@pytest.mark.parametrize("kind", ["another user's", "a folder"])
def test_an_old_lease_that_cannot_be_read_is_taken_over(tmp_path, monkeypatch, kind):
    """A lease left by another user's killed process (mode 600 under umask 077), or a folder where a
    lease goes: judged by its age, as one that cannot be parsed; the launch does not raise."""
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    path = lease_of(tuner, 52)
    write_lease(path, host=socket.gethostname(), pid=LIVE_PID, age_s=0.0)
    if kind == "a folder":
        path.unlink()
        path.mkdir()
    elif AS_ROOT:  # root reads mode-600 files of any owner: refuse reading this one (also renamed)
        real_open = os.open

        def guarded(name, flags, *args, **kwargs):  # the old one: its heartbeat is an hour old
            if not flags & os.O_CREAT and os.path.exists(name) and os.stat(name).st_mtime < time.time() - 60:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(name))
            return real_open(name, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", guarded)
    else:
        path.chmod(0)
    os.utime(path, (time.time() - 3600, time.time() - 3600))  # no heartbeat for an hour
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuTuningWarning)  # no waiting
        launch(tuner, 52)
    assert tuner.last_decision == "tuned" and bench.calls == 3
    assert not path.exists()  # moved aside as stale


def test_a_lease_naming_this_process_is_stale_unless_this_process_holds_it(tmp_path):
    """A restarted container's process often gets the pid its predecessor had (1, for one): a lease
    naming this pid that this process does not hold was left by that predecessor, and is taken over
    at once (it waited for its own pid until the heartbeat aged)."""
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    path = lease_of(tuner, 51)
    write_lease(path, host=socket.gethostname(), pid=os.getpid(), age_s=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuTuningWarning)  # no waiting
        launch(tuner, 51)
    assert tuner.last_decision == "tuned" and bench.calls == 3 and not path.exists()
    mine = lease_mod.Lease(tmp_path / "held", "k")
    assert mine.acquire()
    try:  # one this process holds (another thread tunes that key) is not stale
        assert not lease_mod.is_stale(lease_mod.read_lease(mine.path))
    finally:
        mine.release()


def test_a_lease_being_taken_by_another_thread_of_this_process_is_not_stale(tmp_path, monkeypatch):
    """Two tuner objects of one kernel (a copy, a kernel decorated twice) that miss one key in two
    threads: while one thread writes its new lease, the other must see it held by this process, not
    left by a predecessor with this pid (it took it over, and both tuned the key)."""
    path = tmp_path / "cache.json.lease-x"
    written, release = threading.Event(), threading.Event()
    fsync = os.fsync

    def slow_fsync(fd):  # the window a slow (network) disk leaves between write and return
        written.set()
        assert release.wait(30)
        fsync(fd)

    monkeypatch.setattr(lease_mod.os, "fsync", slow_fsync)
    holder = lease_mod.Lease(path, "k")
    taking = threading.Thread(target=holder.acquire)
    taking.start()
    try:
        assert written.wait(30)
        seen = lease_mod.read_lease(path)
        assert seen is not None and seen.pid == os.getpid() and not lease_mod.is_stale(seen)
    finally:
        release.set()
        taking.join(30)
        holder.release()


@pytest.mark.skipif(not Path("/proc/self/ns/pid").exists(), reason="Linux pid namespaces")
def test_a_holder_in_another_pid_namespace_is_judged_by_its_heartbeat(tmp_path):
    """Containers that share the host's name (``--network host``) each have their pid namespace: a
    holder's pid cannot be looked up from another one, so its heartbeat judges it (a live holder was
    taken over at once because its pid did not exist here)."""
    path = lease_mod.lease_path(tmp_path / "cache.json", "k")
    here = os.readlink("/proc/self/ns/pid")
    for namespace, age_s, stale in [
        ("pid:[1]", 0.0, False),  # another namespace, a fresh heartbeat: alive, whatever its pid
        ("pid:[1]", 3600.0, True),  # another namespace, no heartbeat for an hour
        (here, 0.0, True),  # this namespace: its pid does not exist
        ("", 0.0, True),  # a holder that did not say (an older release): as this namespace
    ]:
        write_lease(path, host=socket.gethostname(), pid=dead_pid(), age_s=age_s, pid_namespace=namespace)
        assert lease_mod.is_stale(lease_mod.read_lease(path)) == stale, namespace
    lease = lease_mod.Lease(tmp_path / "mine", "k")
    assert lease.acquire()
    try:
        assert lease_mod.read_lease(lease.path).pid_namespace == here
    finally:
        lease.release()


def test_a_stale_lease_in_a_root_that_cannot_be_written_does_not_fail_the_launch(tmp_path, monkeypatch):
    """A root mounted read-only (or another user's) after a tuner was killed holds its lease: taking
    it over fails, and the key is tuned as without a lease (the launch raised that OSError)."""
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    path = lease_of(tuner, 52)
    write_lease(path, host=socket.gethostname(), pid=dead_pid(), age_s=0.0)
    rename = os.rename

    def read_only(src, dst, *args, **kwargs):
        if lease_mod.LEASE_SUFFIX in str(src):
            raise OSError(errno.EROFS, "Read-only file system", str(src))
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(lease_mod.os, "rename", read_only)
    launch(tuner, 52)
    assert tuner.last_decision == "tuned" and bench.calls == 3
    assert path.exists()  # left where it was


def test_a_holder_keeps_its_lease_fresh_while_it_tunes(tmp_path, monkeypatch):
    """Processes on other hosts judge a holder by its heartbeat (the lease's mtime): one that tunes
    for longer than STALE_AFTER_S must keep refreshing it, or they would take its key over."""
    monkeypatch.setattr(lease_mod, "HEARTBEAT_S", 0.01)
    path = lease_mod.lease_path(tmp_path / "cache.json", "k")

    def stale_to_another_host() -> bool:
        return lease_mod.is_stale(dataclasses.replace(lease_mod.read_lease(path), host="elsewhere"))

    lease = lease_mod.Lease(path, "k")
    assert lease.acquire()
    try:
        long_ago = time.time() - 3600
        os.utime(path, (long_ago, long_ago))  # as it would look after an hour without heartbeats
        assert stale_to_another_host()
        deadline = time.monotonic() + 30  # a guard against a hang, not a timing claim
        while stale_to_another_host():
            assert time.monotonic() < deadline, "the holder never refreshed its lease"
            time.sleep(0.01)
    finally:
        lease.release()
    assert not path.exists()


@pytest.mark.parametrize("how", ["removed", "taken over"])
def test_a_holder_that_loses_its_lease_says_so(tmp_path, monkeypatch, how):
    """A holder whose lease was removed or taken over (it looked dead to another host) cannot keep
    other processes off its key: that key may be tuned twice, which the user must hear of."""
    monkeypatch.setattr(lease_mod, "HEARTBEAT_S", 0.01)
    path = lease_mod.lease_path(tmp_path / "cache.json", "k")
    lease = lease_mod.Lease(path, "k")
    assert lease.acquire()
    try:
        with pytest.warns(DejavuTuningWarning, match="lost the tuning lease .* another process may tune"):
            if how == "removed":
                path.unlink()
            else:
                write_lease(path, host="elsewhere", pid=1, age_s=0.0)
            assert lease._beat is not None
            lease._beat.join(timeout=10)  # it stops refreshing a lease that is not its own
            assert not lease._beat.is_alive()
    finally:
        lease.release()
    assert path.exists() == (how == "taken over")  # the new holder's lease is left in place


class _InterruptedAt:
    """The lease module's logger, raising KeyboardInterrupt (a Ctrl-C, a SIGINT) at the record whose
    text starts with ``text``, once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.raised = False

    def __getattr__(self, name: str):
        return getattr(logging.getLogger("triton_dejavu_like"), name)

    def debug(self, msg: str, *args) -> None:
        if msg.startswith(self.text) and not self.raised:
            self.raised = True
            raise KeyboardInterrupt


def heartbeats() -> int:
    return sum(t.name == "dejavu-lease-heartbeat" for t in threading.enumerate())


def test_a_tuning_run_interrupted_as_it_takes_its_lease_leaves_none_behind(tmp_path, monkeypatch):
    """A KeyboardInterrupt right after the lease file was created (the heartbeat thread starting)
    left the file and a heartbeat that refreshed it for the life of the process: this process and
    every other one sharing the store then waited for that key until their timeout (60 s to 2 h)."""
    monkeypatch.setenv("TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT", "3600")
    before = heartbeats()
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    interrupt = _InterruptedAt("took the tuning lease")
    monkeypatch.setattr(lease_mod, "log", interrupt)
    with pytest.raises(KeyboardInterrupt):
        launch(tuner, 64)
    assert interrupt.raised
    assert not lease_of(tuner, 64).exists()
    assert heartbeats() == before
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuTuningWarning)  # no wait for a lease of its own
        launch(tuner, 64)
    assert tuner.last_decision == "tuned" and bench.calls == 3


def test_a_live_holder_is_waited_for_until_the_timeout(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT", "0.5")
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    path = lease_of(tuner, 60)
    write_lease(path, host=socket.gethostname(), pid=LIVE_PID, age_s=0.0)  # alive: another process
    with pytest.warns(DejavuTuningWarning) as record:
        launch(tuner, 60)
    texts = [str(w.message) for w in record]
    assert any(f"pid {LIVE_PID} on {socket.gethostname()}" in t and "waiting" in t for t in texts)
    assert any("(at most 0.5 s;" in t for t in texts)  # the timeout as set (it said "at most 0 s")
    assert any("gave up waiting" in t for t in texts)
    assert tuner.last_decision == "tuned" and bench.calls == 3
    assert path.exists()  # not ours: left in place


def test_a_lease_not_written_yet_is_waited_for_and_its_holder_described_in_words(tmp_path, monkeypatch):
    """A lease read between its holder's create and write (empty, fresh) is waited for; the warning
    says its holder is not named yet (it said "pid -1 on ?")."""
    monkeypatch.setenv("TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT", "0.2")
    tuner = make_tuner(bench=InstantBench(), custom_data_storage=tmp_path)
    path = lease_of(tuner, 62)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()  # created, not written
    with pytest.warns(DejavuTuningWarning) as record:
        launch(tuner, 62)
    texts = [str(w.message) for w in record]
    assert any("a process not named in its lease file yet" in t and "waiting" in t for t in texts), texts
    assert not any("pid -1" in t for t in texts)
    assert tuner.last_decision == "tuned"


def test_a_heartbeat_from_the_future_is_reported_as_clocks_that_disagree(tmp_path, monkeypatch):
    """A host whose clock runs ahead writes heartbeats that never age here: its lease is waited for
    until the timeout by every process, which the user can only fix by synchronising the clocks."""
    monkeypatch.setenv("TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT", "0.2")
    tuner = make_tuner(bench=InstantBench(), custom_data_storage=tmp_path)
    write_lease(lease_of(tuner, 66), host="elsewhere", pid=1, age_s=-3600.0)
    with pytest.warns(DejavuTuningWarning) as record:
        launch(tuner, 66)
    texts = [str(w.message) for w in record]
    assert any("3600 s ahead of this host's clock" in t for t in texts), texts
    assert tuner.last_decision == "tuned"


def test_waits_for_many_keys_of_one_kernel_warn_once_and_log_each(tmp_path, monkeypatch, caplog):
    """A warm-up of many keys shared by several processes makes each waiting process wait for many
    keys: the first wait of a kernel is a warning, the later ones are log records that count them."""
    monkeypatch.setenv("TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT", "0.2")
    monkeypatch.setattr(single_flight, "_waits", collections.Counter(), raising=False)
    tuner = make_tuner(bench=InstantBench(), custom_data_storage=tmp_path)
    sizes = (61, 62, 63)
    for n in sizes:
        write_lease(lease_of(tuner, n), host=socket.gethostname(), pid=LIVE_PID, age_s=0.0)
    with (
        caplog.at_level(logging.INFO, logger="triton_dejavu_like"),
        pytest.warns(DejavuTuningWarning) as record,
    ):
        for n in sizes:
            launch(tuner, n)
    waiting = [str(w.message) for w in record if "is being tuned by" in str(w.message)]
    assert len(waiting) == 1 and "waits for other keys of this kernel are only logged" in waiting[0]
    logged = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO and "is being tuned by" in r.getMessage()
    ]
    assert [m.split("; ")[-1] for m in logged] == [
        "2 keys of this kernel waited for so far)",
        "3 keys of this kernel waited for so far)",
    ]


def test_a_result_recorded_while_waiting_is_restored(tmp_path):
    first, second = InstantBench(), InstantBench()
    tuner = make_tuner(bench=first, custom_data_storage=tmp_path)
    launch(tuner, 70)
    other = make_tuner(bench=second, custom_data_storage=tmp_path)
    other._process_state()  # loaded before the result existed: simulate by forgetting it
    other._state.restored.clear()
    path = lease_of(other, 70)
    write_lease(path, host=socket.gethostname(), pid=LIVE_PID, age_s=0.0)
    launch(other, 70)
    assert other.last_decision == "restored" and second.calls == 0


def test_a_result_recorded_while_this_process_tuned_is_launched_and_kept(tmp_path, caplog):
    """Another process recorded the key while this one tuned it (it took over the lease of this one,
    stopped meanwhile, or gave up waiting for it): this one launches that result and does not
    overwrite it, so both launch one config and every later process restores it."""

    class RecordedMeanwhile(InstantBench):
        meanwhile: Callable[[], object] | None = None

        def __call__(self, kernel_call, quantiles=(0.5, 0.2, 0.8)):
            if self.calls == 0 and self.meanwhile is not None:  # while this process benchmarks
                self.meanwhile()
            return super().__call__(kernel_call, quantiles)

    donor = make_tuner(bench=RecordedMeanwhile(), custom_data_storage=tmp_path / "donor")
    launch(donor, 70)  # an entry for key 70, then made to name another config than this one's pick
    document = json.loads(donor.cache_path().read_text())
    (kid,) = document["entries"]
    document["entries"][kid]["config"]["kwargs"]["BLOCK"] = BLOCKS[1]

    bench = RecordedMeanwhile()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path / "store")
    bench.meanwhile = lambda: write_document(tuner.cache_path(), document["identity"], document["entries"])
    with caplog.at_level(logging.INFO, logger="triton_dejavu_like"):
        launch(tuner, 70)
    assert bench.calls == 3  # it tuned
    assert tuner.best_config.kwargs["BLOCK"] == BLOCKS[1]  # and launched the other's result
    assert stored_entries(tuner.cache_path())[kid]["config"]["kwargs"]["BLOCK"] == BLOCKS[1]
    assert "another process recorded key" in caplog.text
    later = make_tuner(bench=RecordedMeanwhile(), custom_data_storage=tmp_path / "store")
    launch(later, 70)
    assert later.last_decision == "restored" and later.best_config.kwargs["BLOCK"] == BLOCKS[1]


def test_a_store_with_read_only_layers_still_waits_for_a_live_holder(tmp_path, monkeypatch):
    # a library that ships tuned results (add_store) or a TRITON_DEJAVU_STORAGE with several roots
    # puts read-only layers behind the written root: the lease of that root must still be honoured
    monkeypatch.setenv("TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT", "0.5")
    (tmp_path / "shipped").mkdir()
    tdl.add_store(tmp_path / "shipped")
    try:
        bench = InstantBench()
        tuner = make_tuner(bench=bench, custom_data_storage=tmp_path / "rw")
        path = lease_of(tuner, 65)
        write_lease(path, host=socket.gethostname(), pid=LIVE_PID, age_s=0.0)  # alive: another process
        with pytest.warns(DejavuTuningWarning) as record:
            launch(tuner, 65)
    finally:
        forget_stores()
    texts = [str(w.message) for w in record]
    assert any(f"pid {LIVE_PID} on {socket.gethostname()}" in t and "waiting" in t for t in texts)
    assert tuner.last_decision == "tuned" and bench.calls == 3
    assert path.exists()  # not ours: left in place


def test_a_read_only_store_tunes_without_a_lease(tmp_path, monkeypatch):
    bench = InstantBench()
    store = tmp_path / "ro"
    tuner = make_tuner(bench=bench, custom_data_storage=store)
    store.mkdir()
    if AS_ROOT:  # root writes anywhere: its writes there are refused instead
        deny_opens(monkeypatch, store, errno.EACCES, writes_only=True)
    store.chmod(0o555)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            launch(tuner, 80)
    finally:
        store.chmod(0o755)
    assert tuner.last_decision == "tuned" and bench.calls == 3
    assert leases(tmp_path) == []


def test_the_wait_scales_with_stored_tuning_times():
    from storage_helpers import make_entry

    from triton_dejavu_like.store import StoredEntry

    slow = make_entry((1,))
    slow.update(tuning_time_s=600.0, evaluated=10)  # 60 s per candidate
    history = {"k": StoredEntry.from_json(key_id((1,)), slow)}
    assert single_flight.wait_timeout_s(50, history) == single_flight.MAX_WAIT_S
    assert single_flight.wait_timeout_s(2, history) == 3 * 120 + 30
    assert single_flight.wait_timeout_s(2, {}) == single_flight.MIN_WAIT_S
