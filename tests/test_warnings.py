"""Every problem the user must act on reaches them as a warning of a package class.

Each situation is checked with ``pytest.warns(<class>)`` (the ``warnings`` machinery, not the log),
and one test runs a plain script with Python's default warning settings and reads its stderr.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import triton
from storage_helpers import (
    AS_ROOT,
    IDENTITY,
    InstantBench,
    aside_files,
    cache_file,
    deny_opens,
    deny_search,
    double_kernel,
    entries_for,
    launch,
    make_entry,
    make_tuner,
    stored_entries,
    write_document,
)

import triton_dejavu_like as tdl
from triton_dejavu_like import (
    DejavuConfigWarning,
    DejavuStorageWarning,
    DejavuTuningWarning,
    DejavuWarning,
    TimingPolicy,
    _env,
)
from triton_dejavu_like import store as storage
from triton_dejavu_like.codec import key_id
from triton_dejavu_like.store import layout

# --- files that cannot be used --------------------------------------------------------------------------


def test_a_corrupt_file_moved_aside(tmp_path):
    cf = cache_file(tmp_path)
    cf.path.parent.mkdir(parents=True)
    cf.path.write_bytes(b"{not json")
    with pytest.warns(DejavuStorageWarning, match="moved it to cache.json.corrupt-"):
        assert cf.load() == {}


def test_rejected_entries(tmp_path):
    cf = cache_file(tmp_path)
    bad = {**make_entry((2,)), "timings_ms": ["fast"]}
    write_document(cf.path, IDENTITY, {**entries_for([(1,)]), key_id((2,)): bad})
    with pytest.warns(DejavuStorageWarning, match="1 invalid entries"):
        assert list(cf.load()) == [key_id((1,))]


@pytest.mark.parametrize("damage", ["corrupt", "rejected"])
def test_each_file_set_aside_is_reported_also_a_second_one_of_one_path(tmp_path, damage):
    """A long-running process whose cache file is damaged twice sets two files aside: each is news
    (the user finds both beside the cache file), not only the first one of that path."""
    cf = cache_file(tmp_path)
    cf.path.parent.mkdir(parents=True)
    bad = {**make_entry((2,)), "timings_ms": ["fast"]}
    said = []
    for _ in range(2):
        if damage == "corrupt":
            cf.path.write_bytes(b"{not json")
        else:
            write_document(cf.path, IDENTITY, {**entries_for([(1,)]), key_id((2,)): bad})
        with pytest.warns(DejavuStorageWarning) as shown:
            cf.load()
        said += [str(w.message) for w in shown]
    suffix = layout.CORRUPT_SUFFIX if damage == "corrupt" else layout.REJECTED_SUFFIX
    aside = aside_files(cf.path, suffix)
    assert len(aside) == 2 and len(said) == 2
    assert all(sum(a.name in text for text in said) == 1 for a in aside), said


def test_a_file_of_another_identity(tmp_path):
    cf = cache_file(tmp_path)
    write_document(cf.path, {**IDENTITY, "gpu": "other"}, entries_for([(1,)]))
    with pytest.warns(DejavuStorageWarning, match="another identity"):
        assert cf.load() == {}


def test_a_file_of_a_newer_schema(tmp_path):
    cf = cache_file(tmp_path)
    cf.path.parent.mkdir(parents=True)
    cf.path.write_text('{"schema": 99}')
    with pytest.warns(DejavuStorageWarning, match="newer release"):
        assert cf.load() == {}


def test_an_entry_that_cannot_be_stored(tmp_path):
    with pytest.warns(DejavuStorageWarning, match="not storing the result"):
        assert not cache_file(tmp_path).record({"k": {"key": []}})


def test_a_cache_file_that_cannot_be_opened(tmp_path, monkeypatch):
    cf = cache_file(tmp_path)
    original = write_document(cf.path, IDENTITY, entries_for([(1,)]))
    if AS_ROOT:  # root reads mode-000 files: simulate the refusal
        deny_opens(monkeypatch, cf.path, errno.EACCES, writes_only=False)
    else:
        cf.path.chmod(0)
    try:
        with pytest.warns(DejavuStorageWarning, match="cannot read tuning cache"):
            assert cf.load() == {}
        assert not cf.record(entries_for([(2,)]))
    finally:
        monkeypatch.undo()
        cf.path.chmod(0o644)
    assert cf.path.read_bytes() == original


def test_a_directory_where_the_cache_file_goes(tmp_path):
    cf = cache_file(tmp_path)
    cf.path.mkdir(parents=True)
    (cf.path / "something").write_text("kept")
    with pytest.warns(DejavuStorageWarning, match="Is a directory"):
        assert cf.load() == {}
    assert not cf.record(entries_for([(1,)]))  # neither used nor moved nor overwritten
    assert (cf.path / "something").read_text() == "kept"


# --- storage roots and locks that cannot be used --------------------------------------------------------


def test_a_root_that_is_a_file(tmp_path):
    root = tmp_path / "file"
    root.write_text("")
    with pytest.warns(DejavuStorageWarning, match="results stay in memory"):
        assert not cache_file(root).record(entries_for([(1,)]))


def test_dev_null_as_root():
    with pytest.warns(DejavuStorageWarning, match="results stay in memory"):
        assert not cache_file(Path(os.devnull)).record(entries_for([(1,)]))


def test_dev_null_as_the_storage_variable_still_runs_kernels(monkeypatch):
    monkeypatch.setenv(_env.STORAGE, os.devnull)
    bench = InstantBench()
    tuner = make_tuner(bench=bench)
    with pytest.warns(DejavuStorageWarning, match="results stay in memory"):
        launch(tuner, 100)
    launch(tuner, 100)
    assert bench.calls == 3  # tuned once, then kept in memory


def test_a_read_only_root(tmp_path, monkeypatch):
    deny_opens(monkeypatch, tmp_path, errno.EROFS, writes_only=True)
    with pytest.warns(DejavuStorageWarning, match="Read-only file system"):
        assert not cache_file(tmp_path).record(entries_for([(1,)]))


def test_a_full_disk_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    cf = cache_file(tmp_path)
    assert cf.record(entries_for([(1,)]))
    before = cf.path.read_bytes()
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def fileno(self):
            return self.handle.fileno()

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fdopen(fd, mode="r", *args, **kwargs):
        handle = real_fdopen(fd, mode, *args, **kwargs)
        return Full(handle) if "w" in mode else handle

    monkeypatch.setattr(os, "fdopen", fdopen)
    with pytest.warns(DejavuStorageWarning, match="No space left"):
        assert not cf.record(entries_for([(2,)]))
    monkeypatch.undo()
    assert cf.path.read_bytes() == before
    assert not list(cf.path.parent.glob("*.tmp"))


def test_a_lock_file_that_cannot_be_opened(tmp_path):
    cf = cache_file(tmp_path, lock_timeout=0.2)
    cf.lock_path.mkdir(parents=True)  # a directory where the lock file goes
    with pytest.warns(DejavuStorageWarning, match="Is a directory.*cache.json.lock"):
        assert not cf.record(entries_for([(1,)]))  # at once: no waiting for the lock timeout


def test_a_lock_held_too_long(tmp_path):
    cf = cache_file(tmp_path, lock_timeout=0.1)
    cf.lock_path.parent.mkdir(parents=True)
    with open(cf.lock_path, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.warns(DejavuStorageWarning, match="could not lock") as caught:
            assert not cf.record(entries_for([(1,)]))
    assert f"continue or end it (fuser {cf.lock_path} names it)" in str(caught[0].message)


def test_a_root_that_cannot_be_written_says_what_to_do(tmp_path):
    """A rank or process whose storage root cannot be created (under a file: root ignores modes) tunes,
    launches its winner, and is told to point the storage elsewhere (it said only that results stay in
    memory)."""
    (tmp_path / "file").write_text("")
    tuner = make_tuner(bench=InstantBench(), custom_data_storage=tmp_path / "file" / "root")
    with pytest.warns(DejavuStorageWarning, match="cannot write tuning results under") as caught:
        launch(tuner, 50)
    assert tuner.last_decision == "tuned"
    texts = [str(w.message) for w in caught if "cannot write" in str(w.message)]
    assert "point TRITON_DEJAVU_STORAGE (or custom_data_storage=) at a folder" in texts[0]


# --- settings -------------------------------------------------------------------------------------------


def test_force_fallback_without_a_heuristic(monkeypatch):
    monkeypatch.setenv(_env.FORCE_FALLBACK, "1")
    with pytest.warns(DejavuConfigWarning, match="no fallback_heuristic"):
        launch(make_tuner(), 100)


def test_force_fallback_without_a_heuristic_in_read_only_mode_says_nothing_is_tuned(monkeypatch):
    monkeypatch.setenv(_env.FORCE_FALLBACK, "1")
    monkeypatch.setenv(_env.READ_ONLY, "1")
    bench = InstantBench()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch(make_tuner(bench=bench), 100)
    [forced] = [str(w.message) for w in caught if "no fallback_heuristic" in str(w.message)]
    assert forced.endswith("answering misses as with tuning off"), forced
    assert bench.calls == 0


@pytest.mark.parametrize(
    "options, names",
    [
        ({"warmup": 25, "rep": 100}, "warmup, rep"),
        ({"use_cuda_graph": True}, "use_cuda_graph"),
        ({"timing": TimingPolicy(finalists=0)}, "timing"),
    ],
)
def test_timing_arguments_that_do_bench_overrides(options, names):
    """With ``do_bench`` given, ``warmup``/``rep``/``use_cuda_graph``/``timing`` change nothing (the
    user's ``do_bench`` times every candidate; ``triton.autotune`` would ignore ``do_bench`` instead):
    said once, at decoration."""
    with pytest.warns(DejavuConfigWarning, match=f"double_kernel: do_bench is given, so {names} ha"):
        tuner = make_tuner(**options)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuConfigWarning)
        make_tuner(**options)  # once
        launch(tuner, 100)


KERNEL_MODULE = """
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 2)
"""


def test_ignored_arguments_are_said_once_per_kernel_and_arguments(tmp_path, monkeypatch):
    """Said once per cause and place: another set of ignored arguments of one kernel, or a kernel
    of the same name in another module, is news (the warning was once per kernel name)."""
    (tmp_path / "other_kernels.py").write_text(KERNEL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import other_kernels

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        make_tuner(warmup=25)
        make_tuner(rep=100)
        make_tuner(warmup=25)  # said already
        make_tuner(other_kernels.double_kernel, warmup=25)
    texts = [str(w.message) for w in said if issubclass(w.category, DejavuConfigWarning)]
    assert [t.split(" no effect")[0] for t in texts] == [
        "storage_helpers.double_kernel: do_bench is given, so warmup has",
        "storage_helpers.double_kernel: do_bench is given, so rep has",
        "other_kernels.double_kernel: do_bench is given, so warmup has",  # named by its module
    ]


def test_kernels_of_one_name_in_two_modules_are_each_warned_about(tmp_path, monkeypatch):
    """A serving engine has several kernels of one short name (``_fwd_kernel``) in different modules:
    with tuning off, each one's misses are said, naming its module; the warning was once per short
    name, so the second kernel's misses went unsaid."""
    (tmp_path / "other_kernels.py").write_text(KERNEL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import other_kernels

    with warnings.catch_warnings(record=True) as said, tdl.tuning(False):
        warnings.simplefilter("always")
        for kernel in (double_kernel, other_kernels.double_kernel, double_kernel):
            launch(make_tuner(kernel), 64)
    texts = [str(w.message) for w in said if issubclass(w.category, DejavuTuningWarning)]
    assert [t.split(": tuning is off")[0] for t in texts] == [
        "storage_helpers.double_kernel",
        "other_kernels.double_kernel",
    ]
    # counted under the names the warnings use
    assert tdl.misses().keys() == {"storage_helpers.double_kernel", "other_kernels.double_kernel"}


def test_none_for_a_search_budget_argument_is_its_default():
    """triton-dejavu's positional order invites None placeholders: search_max_repeat=None and
    search_seed=None raised a TypeError naming neither, and warned that they have no effect."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuConfigWarning)
        make_tuner(search_max_repeat=None, search_seed=None)
        tuner = make_tuner(use_random_search=True, search_max_repeat=None, search_seed=None)
    assert (tuner.settings.budget.max_repeat, tuner.settings.budget.seed) == (1, 0)
    with pytest.raises(TypeError, match="search_seed must be a whole number"):
        make_tuner(use_random_search=True, search_seed="7")


@pytest.mark.parametrize(
    ("value", "error"), [(-1, ValueError), (1.5, TypeError), (True, TypeError), ("7", TypeError)]
)
@pytest.mark.parametrize("strategy", [{}, {"use_random_search": True}])
def test_a_bad_search_budget_value_is_an_error_whatever_the_strategy(value, error, strategy):
    """Exhaustive search (the default) accepted search_seed=-1 or 1.5, at most warning that the
    seed has no effect: the same code then failed once random search was turned on."""
    with pytest.raises(error, match="search_seed"):
        make_tuner(search_seed=value, **strategy)


def test_timing_arguments_without_do_bench_are_not_warned_about():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuConfigWarning)
        tdl.autotune(key=["n"], configs=[triton.Config({"BLOCK": 16})], warmup=25, rep=100)(double_kernel)


def own_timer_tuner(**options):
    """double_kernel tuned by the package's own timer (no do_bench)."""
    return tdl.autotune(key=["n"], configs=[triton.Config({"BLOCK": 16})], **options)(double_kernel)


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    """Decorating as for a kernel that is not interpreted (compiled for a GPU): the timing arguments
    then mean what they mean there."""
    from triton_dejavu_like import _compat

    monkeypatch.setattr(_compat, "is_interpreted", lambda fn: False)


def test_gpu_timing_arguments_under_the_interpreter():
    """The interpreter's CPU timer takes warmup and rep only: use_cuda_graph and timing= given to a
    kernel it runs have no effect, said once at decoration (timing= as a whole, not its fields)."""
    options = {"use_cuda_graph": True, "warmup": 5, "timing": TimingPolicy(finalists=0, screen_ms=5.0)}
    with pytest.warns(DejavuConfigWarning) as shown:
        own_timer_tuner(**options)
    assert [str(w.message) for w in shown] == [
        "storage_helpers.double_kernel: use_cuda_graph, timing have no effect under the interpreter "
        "(TRITON_INTERPRET=1): candidates are timed on the CPU, with warmup and rep only"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuConfigWarning)
        own_timer_tuner(**options)  # once
        own_timer_tuner(warmup=5, rep=20)  # the CPU timer uses these


@pytest.mark.usefixtures("as_on_a_gpu")
@pytest.mark.parametrize(
    "options, said",
    [
        (
            {"timing": TimingPolicy(finalists=0, screen_ms=5.0, final_ms=50.0)},
            "timing=TimingPolicy(screen_ms, final_ms) have no effect: finalists=0 times every candidate",
        ),
        (
            {"warmup": 25, "timing": TimingPolicy(final_margin=0.0)},
            "timing=TimingPolicy(final_margin) has no effect: with warmup, rep or use_cuda_graph given",
        ),
        (
            {"use_cuda_graph": True, "timing": TimingPolicy(final_ms=20.0, screen_ms=5.0)},
            "timing=TimingPolicy(final_ms) has no effect",
        ),
    ],
)
def test_timing_policy_fields_that_the_other_timing_arguments_leave_unused(options, said):
    """The careful stage's fields do nothing when Triton's do_bench times the finalists (warmup, rep or
    use_cuda_graph given), and every field but finalists does nothing with finalists=0: said once, at
    decoration, naming only the fields set to other than their defaults."""
    with pytest.warns(DejavuConfigWarning, match=re.escape(f"double_kernel: {said}")):
        own_timer_tuner(**options)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuConfigWarning)
        own_timer_tuner(**options)  # once


@pytest.mark.usefixtures("as_on_a_gpu")
def test_timing_policy_fields_in_use_are_not_warned_about():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuConfigWarning)
        own_timer_tuner(timing=TimingPolicy(screen_ms=5.0, final_ms=50.0, final_margin=0.0))
        own_timer_tuner(warmup=25, timing=TimingPolicy(screen_ms=5.0, finalists=3))
        own_timer_tuner(timing=TimingPolicy(finalists=0))


def test_use_only_restored_without_a_stored_winner_tunes_everything_and_says_so(monkeypatch):
    monkeypatch.setenv(_env.USE_ONLY_RESTORED, "1")
    bench = InstantBench()
    tuner = make_tuner(bench=bench)
    with pytest.warns(DejavuConfigWarning, match="USE_ONLY_RESTORED=1 but no stored winner.*all 3 of them"):
        launch(tuner, 100)
    assert bench.calls == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuConfigWarning)
        launch(tuner, 200)  # restricted to the winner of n=100 now: nothing to say


def test_isolation_arguments_without_isolation():
    """isolation_timeout_s bounds a candidate in an isolated worker only: without isolation (neither
    use_isolated_process=True nor the variable) it is said to have no effect, at the first tuning."""
    tuner = make_tuner(isolation_timeout_s=30, isolation_start_method="spawn")
    with pytest.warns(DejavuConfigWarning) as shown:
        launch(tuner, 100)
    said = sorted(str(w.message) for w in shown if "isolated process" in str(w.message))
    assert [s.split(" has no effect")[0] for s in said] == [
        "storage_helpers.double_kernel: isolation_start_method",
        "storage_helpers.double_kernel: isolation_timeout_s",
    ]


def test_check_arguments_with_the_check_turned_off():
    """numerical_check=False turns the check off, so a reference_fn or a tolerance given beside it
    changes nothing: said once at decoration (it was silent)."""
    with pytest.warns(
        DejavuConfigWarning,
        match="double_kernel: numerical_check=False, so reference_fn, check_rtol have no effect",
    ):
        make_tuner(numerical_check=False, reference_fn=print, check_rtol=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuConfigWarning)
        make_tuner(numerical_check=True, check_rtol=0.1)
        make_tuner(check_atol=0.1)  # turns the check on
        make_tuner(numerical_check=False)


def test_compile_processes_asked_for_under_the_interpreter(monkeypatch):
    """TRITON_DEJAVU_COMPILE_PROCESSES=1 asks for compile worker processes; the interpreter compiles
    nothing, so the variable has no effect: said once per kernel, at its first tuning."""
    monkeypatch.setenv(_env.COMPILE_PROCESSES, "1")
    tuner = make_tuner()
    with pytest.warns(DejavuConfigWarning) as shown:
        launch(tuner, 100)
    said = [str(w.message) for w in shown if _env.COMPILE_PROCESSES in str(w.message)]
    assert said == [
        "storage_helpers.double_kernel: nothing is compiled despite TRITON_DEJAVU_COMPILE_PROCESSES=1: "
        "the interpreter runs kernels without compiling them"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuConfigWarning)
        launch(tuner, 200)


def test_search_budget_arguments_without_a_search_strategy():
    """Exhaustive search (neither use_random_search nor use_bo) measures every candidate: a budget
    given to it has no effect, said once at decoration."""
    with pytest.warns(
        DejavuConfigWarning,
        match="double_kernel: search_max_search_t, search_seed have no effect without use_random_search",
    ):
        make_tuner(search_max_search_t=5, search_seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuConfigWarning)
        make_tuner(search_max_search_t=5, search_seed=3, use_random_search=True)
        make_tuner(search_max_repeat=1, search_seed=0)  # the defaults


@pytest.mark.parametrize(
    "name, value",
    [(_env.FORCE_FALLBACK, "maybe"), (_env.COMPILE_THREADS, "-3"), (_env.ISOLATION_TIMEOUT, "nan")],
)
def test_an_invalid_environment_value(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.warns(DejavuConfigWarning, match=name):
        (_env.force_fallback(), _env.compile_threads(), _env.isolation_timeout_s())


def test_a_stored_config_that_is_no_longer_a_candidate(tmp_path):
    seed = make_tuner(custom_data_storage=tmp_path)
    launch(seed, 100)
    path = seed.cache_path()
    doc = storage.read_document(path)
    [(kid, entry)] = doc.entries.items()
    data = entry.to_json()
    data["config"] = make_entry((0,), block=8)["config"]  # a config the kernel does not list
    write_document(path, doc.identity, {kid: data})
    tuner = make_tuner(custom_data_storage=tmp_path)  # a new process, in effect
    with pytest.warns(DejavuTuningWarning, match="not among the current candidates"):
        launch(tuner, 100)


def test_every_class_is_a_dejavu_warning_and_a_user_warning():
    for cls in (DejavuStorageWarning, DejavuConfigWarning, DejavuTuningWarning):
        assert issubclass(cls, DejavuWarning) and issubclass(cls, UserWarning)


# --- what a user sees without configuring anything ------------------------------------------------------


SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from triton_dejavu_like.store import CacheFile
    root = Path(sys.argv[1])
    identity = dict.fromkeys(
        ["dejavu", "triton", "toolchain", "gpu", "kernel", "autotune_config", "code_version",
         "tune_features", "kernel_configs", "tag"], "x")
    cf = CacheFile.for_identity(root, identity)
    cf.path.parent.mkdir(parents=True)
    cf.path.write_text("{broken")
    cf.load()
    CacheFile.for_identity(Path("/dev/null"), identity).record({})
    CacheFile.for_identity(Path("/dev/null"), identity).update(lambda current: {"k": None})
    """
)


def test_warnings_show_on_stderr_with_default_settings(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONWARNINGS")}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "root")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 0, result.stderr
    assert "DejavuStorageWarning: ignoring unreadable tuning cache" in result.stderr
    assert "DejavuStorageWarning: cannot write tuning results under /dev/null" in result.stderr


ERRORS = "import warnings, triton_dejavu_like as t; warnings.simplefilter('error', t.DejavuStorageWarning)"


def test_warnings_can_be_made_errors(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", ERRORS + SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 1 and "DejavuStorageWarning" in result.stderr.splitlines()[-1]


def test_a_relayed_warning_whose_arguments_do_not_fit_does_not_silence_the_next():
    """A worker's warning that arrives with arguments its message cannot take is refused; the same
    warning arriving whole from another worker is still issued (the first one used to silence it)."""
    from triton_dejavu_like import _log

    message = "kernel %s: %d keys missing"
    bad = {"category": "DejavuTuningWarning", "subject": "k", "message": message, "args": ["k", "many"]}
    good = {**bad, "args": ["k", 3]}
    assert not _log.reissue_warning(bad)
    with pytest.warns(DejavuTuningWarning, match="kernel k: 3 keys missing"):
        assert _log.reissue_warning(good)


def test_a_warning_names_the_users_line(monkeypatch):
    """Warnings named a line of the package (``-W ...:mymodule`` filters did not apply): they name the
    decoration or the launch that caused them."""
    import linecache

    tuner = tdl.autotune(key=["n"], configs=[triton.Config({"BLOCK": b}) for b in (16, 32)])(double_kernel)
    options = {"key": ["n"], "configs": [triton.Config({"BLOCK": 16})], "do_bench": InstantBench(), "rep": 5}
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        tdl.autotune(**options)(double_kernel)
        decorated = sys._getframe().f_lineno - 1
        monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
        launch(tuner, 50)
    places = [(w.filename, w.lineno) for w in said if issubclass(w.category, tdl.DejavuWarning)]
    assert len(places) == 2
    assert places[0] == (__file__, decorated)
    assert Path(places[1][0]).name == "storage_helpers.py"  # launch(): the line that launches
    assert "tuner[" in linecache.getline(*places[1])


@pytest.mark.parametrize("read_only", [False, True])
def test_a_cache_file_under_a_folder_this_user_cannot_search(tmp_path, monkeypatch, read_only):
    """Another user's folder (mode 700) on a shared root, on the way to this kernel's cache file: a
    launch warns once and decides the key (results stay in memory), it does not raise."""
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        launch(make_tuner(custom_data_storage=tmp_path), 40)  # another process stored key 40
    private = tuner.cache_path().parent
    deny_search(monkeypatch, private)
    try:
        with tdl.tuning(not read_only), pytest.warns(DejavuStorageWarning, match="cannot read tuning cache"):
            launch(tuner, 40)
    finally:
        monkeypatch.undo()
        private.chmod(0o755)
    assert tuner.last_decision == ("tuned" if not read_only else "default")
    assert len(stored_entries(tuner.cache_path())) == 1  # the other process's entry, untouched
