"""triton-dejavu 0.7's decorator arguments and ``TRITON_DEJAVU_*`` variables, against ours alone.

Each is implemented, accepted with a documented equivalent, or rejected with an error that says what
to use instead (docs/compat.md); never a bare ``TypeError``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import triton
from compat_helpers import Bench, accumulate_kernel, add_kernel, blocks_of, grid, key_for, run_add

import triton_dejavu_like as tdl
from triton_dejavu_like._log import forget_warnings

# --- arguments implemented since the start (a smoke test each, in dejavu's keyword spelling) -------------


def test_dejavu_keywords_already_implemented(tmp_path):
    bench = Bench()
    tuner = tdl.autotune(
        key=["n"],
        configs=bench.configs(),
        prune_configs_by=None,
        reset_to_zero=None,
        restore_value=None,
        pre_hook=None,
        post_hook=None,
        warmup=5,
        rep=20,
        use_cuda_graph=False,
        fallback_heuristic=lambda key: triton.Config({"BLOCK": 64}),
        use_bo=False,
        use_random_search=False,
        search_max_search_t=10,
        search_max_share=1.0,
        search_max_repeat=1,
        custom_data_storage=str(tmp_path / "custom"),
        ignore_dtypes=True,
        do_bench=bench,
    )(add_kernel)
    run_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    assert tuner.cache == {(100,): tuner.best_config}
    assert str(tuner.cache_path()).startswith(str(tmp_path / "custom"))


def test_a_relative_custom_data_storage_is_taken_from_where_the_kernel_is_decorated(tmp_path, monkeypatch):
    """triton-dejavu makes it absolute when the kernel is decorated: a program that changes its
    working directory after importing its kernels still reads and writes the same folder."""
    (tmp_path / "app").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "app")
    bench = Bench()
    decorate = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench, custom_data_storage="data")
    tuner = decorate(add_kernel)
    monkeypatch.chdir(tmp_path / "elsewhere")
    run_add(tuner)
    assert tuner.cache_path().is_relative_to(tmp_path / "app" / "data")
    assert tuner.cache_path().is_file() and not (tmp_path / "elsewhere" / "data").exists()


def test_dejavu_positional_order():
    """dejavu: autotune(key, configs, prune_configs_by, reset_to_zero, restore_value, pre_hook,
    post_hook, warmup, rep, use_cuda_graph, config_space, fallback_heuristic, informed_fallback,
    prepare_informed_fallback, use_bo, use_random_search, search_max_search_t, search_max_share,
    search_max_repeat, quantiles, metadata_key, custom_data_storage, ignore_dtypes)."""
    bench = Bench()
    pruned = []

    def early(cs, nargs, **kw):
        pruned.append(len(cs))
        return cs

    tuner = tdl.autotune(
        ["n"], bench.configs(), {"early_config_prune": early}, None, None, None, None, 5, 20, False, None,
        None, None, None, False, False, 10, 1.0, 1, (0.5, 0.2, 0.8), None, None, True,
        do_bench=bench,
    )(add_kernel)  # fmt: skip
    run_add(tuner)
    assert pruned == [4]
    assert tuner.cache == {(100,): tuner.best_config}  # ignore_dtypes, the 23rd


def test_hooks_written_for_dejavu_take_the_positional_arguments_by_position():
    """triton-dejavu called ``pre_hook(args)`` and ``post_hook(args)`` with the call's positional
    arguments, and no ``exception``: such hooks run unchanged (here a reset by position, which every
    benchmark launch and the launch after tuning start from)."""
    bench = Bench()
    seen = []

    def reset(args, reset_only=False):
        args[0].zero_()

    def post(args):
        seen.append((args[-1], args["n"]))

    tuner = tdl.autotune(key=["n"], configs=bench.configs(), pre_hook=reset, post_hook=post, do_bench=bench)(
        accumulate_kernel
    )
    acc, x = torch.full((100,), 7.0), torch.arange(100, dtype=torch.float32)
    tuner[grid(100)](acc, x, 100)
    assert torch.equal(acc, x)
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    assert seen == [(100, 100)] * len(bench.timed)


def test_a_post_hook_with_a_second_parameter_of_another_name_is_called_as_upstream_calls_it():
    """Only a one-parameter hook is triton-dejavu's ``post_hook(args)``. ``post(nargs, err)`` was called
    with one argument ("missing 1 required positional argument", though two were written), and
    ``post(nargs, err=None)`` ran with every launch's exception dropped; upstream passes
    ``exception=`` to both, which fails and says which name it wants."""

    def two(nargs, err):
        pass

    def defaulted(nargs, err=None):
        pass

    for hook in (two, defaulted):
        tuner = tdl.autotune(key=["n"], configs=Bench().configs(), post_hook=hook, do_bench=Bench())(
            add_kernel
        )
        with pytest.raises(TypeError, match="unexpected keyword argument 'exception'") as info:
            run_add(tuner)
        assert info.value.stopped_by == "post_hook"


def test_dejavu_positional_fallback_heuristic_is_twelfth(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    bench = Bench()
    heuristic = lambda key: triton.Config({"BLOCK": 128}, num_warps=1)  # noqa: E731
    tuner = tdl.autotune(
        ["n"], bench.configs(), None, None, None, None, None, None, None, False, None, heuristic,
        do_bench=bench,
    )(add_kernel)  # fmt: skip
    run_add(tuner)
    assert bench.timed == []
    assert tuner.best_config.kwargs == {"BLOCK": 128}


# --- quantiles -------------------------------------------------------------------------------------------


def test_quantiles_are_passed_to_do_bench_and_stored():
    bench = Bench()
    tuner = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench, quantiles=(0.5, 0.1, 0.9))(
        add_kernel
    )
    run_add(tuner)
    assert all(tuple(q) == (0.5, 0.1, 0.9) for q in bench.quantiles)
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    entry = next(iter(json.loads(tuner.cache_path().read_text())["entries"].values()))
    assert entry["timings_ms"] == pytest.approx([2.0, 2.2, 2.4])
    assert entry.get("quantiles") == [0.5, 0.1, 0.9]


def test_quantiles_change_the_storage_identity():
    a = tdl.autotune(key=["n"], configs=Bench().configs())(add_kernel)
    b = tdl.autotune(key=["n"], configs=Bench().configs(), quantiles=(0.5, 0.1, 0.9))(add_kernel)
    c = tdl.autotune(key=["n"], configs=Bench().configs(), quantiles=None)(add_kernel)
    assert a.cache_path() != b.cache_path()
    assert a.cache_path() == c.cache_path()


@pytest.mark.parametrize("bad", [(1.5,), (), "0.5", (0.5, "x")])
def test_bad_quantiles_are_a_value_error(bad):
    with pytest.raises(ValueError, match="quantiles must be"):
        tdl.autotune(key=["n"], configs=Bench().configs(), quantiles=bad)(add_kernel)


# --- informed fallback -------------------------------------------------------------------------------------


def _tune_once(bench=None):
    bench = bench or Bench()
    tuner = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench)(add_kernel)
    run_add(tuner, 100)
    return tuner


def test_informed_fallback_gets_the_key_and_the_restored_results(monkeypatch):
    _tune_once()  # "an earlier process": stores n=100 -> BLOCK 32
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    calls = []

    def informed(key, cache):
        calls.append((key, {k: v.kwargs for k, v in cache.items()}))
        return triton.Config({"BLOCK": 64}, num_warps=1)

    bench = Bench()
    tuner = tdl.autotune(
        key=["n"],
        configs=bench.configs(),
        do_bench=bench,
        informed_fallback=informed,
        fallback_heuristic=lambda key: triton.Config({"BLOCK": 16}),
    )(add_kernel)
    run_add(tuner, 100)  # restored: no fallback
    assert calls == [] and tuner.best_config.kwargs == {"BLOCK": 32}
    run_add(tuner, 60)  # a miss: the informed fallback wins over fallback_heuristic
    assert calls == [(key_for(60), {key_for(100): {"BLOCK": 32}})]
    assert tuner.best_config.kwargs == {"BLOCK": 64}
    assert bench.timed == []


def test_prepare_informed_fallback_runs_once_and_its_result_is_passed(monkeypatch):
    _tune_once()
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    prepared = []

    def prepare(cache):
        prepared.append(dict(cache))
        return {"smallest": 16}

    seen = []

    def informed(key, cache):
        seen.append(cache)
        return triton.Config({"BLOCK": cache["smallest"]}, num_warps=1)

    bench = Bench()
    tuner = tdl.autotune(
        key=["n"],
        configs=bench.configs(),
        do_bench=bench,
        informed_fallback=informed,
        prepare_informed_fallback=prepare,
    )(add_kernel)
    run_add(tuner, 60)
    run_add(tuner, 70)
    assert len(prepared) == 1 and list(prepared[0]) == [key_for(100)]
    assert seen == [{"smallest": 16}, {"smallest": 16}]
    assert tuner.best_config.kwargs == {"BLOCK": 16}


def test_informed_fallback_without_stored_results_uses_fallback_heuristic(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    bench = Bench()
    tuner = tdl.autotune(
        key=["n"],
        configs=bench.configs(),
        do_bench=bench,
        informed_fallback=lambda key, cache: pytest.fail("called with an empty cache"),
        fallback_heuristic=lambda key: triton.Config({"BLOCK": 128}, num_warps=1),
    )(add_kernel)
    run_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 128} and bench.timed == []


def test_prepare_informed_fallback_alone_is_an_error():
    with pytest.raises(ValueError, match="prepare_informed_fallback needs informed_fallback"):
        tdl.autotune(key=["n"], configs=Bench().configs(), prepare_informed_fallback=lambda c: c)(add_kernel)


# --- metadata_key -----------------------------------------------------------------------------------------


def test_metadata_key_records_the_chosen_config():
    bench = Bench()
    tuner = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench, metadata_key="add")(add_kernel)
    run_add(tuner)
    expected = f"<autotune:{tuner.best_config}>".replace(" ", "")
    assert tdl.global_metadata_store["add"] == expected
    assert "BLOCK:32" in expected


def test_dejavu_utils_module_serves_the_proton_metadata_recipe():
    """triton-dejavu's proton recipe: ``from triton_dejavu.utils import unpack_grid, get_random_key,
    global_metadata_store``, a metadata_key from get_random_key, read back in a metadata_fn."""
    from triton_dejavu_like.utils import get_random_key, global_metadata_store, unpack_grid

    assert global_metadata_store is tdl.global_metadata_store
    key = get_random_key(prefix="add")
    assert key.startswith("add-") and len(key) == len("add-") + 8 and key[4:].isalnum()
    assert get_random_key() != get_random_key() and len(get_random_key()) == 8
    assert [unpack_grid(g) for g in ((4,), [4, 2], (4, 2, 3))] == [(4, 1, 1), (4, 2, 1), (4, 2, 3)]
    with pytest.raises(ValueError, match="one to three"):
        unpack_grid(())
    bench = Bench()
    tuner = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench, metadata_key=key)(add_kernel)
    run_add(tuner)
    expected = f"<autotune:{tuner.best_config}>".replace(" ", "")
    assert global_metadata_store.get(key, "<no-autotune>") == expected


def test_utils_is_an_attribute_after_a_plain_import():
    """triton-dejavu's package imports its ``utils`` on the way, so ``triton_dejavu.utils.…`` works
    after ``import triton_dejavu``; a fresh interpreter, where nothing imported the module yet."""
    code = "import triton_dejavu_like as t; print(t.utils.get_random_key(prefix='k')[:2])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "k-"


def test_every_candidate_failing_is_a_runtime_error():
    """triton-dejavu raises ``RuntimeError("All autotune examples failed ...")`` then; ours is also
    one (and an instance of the candidate's own error class, as for upstream's autotuner)."""
    bench = Bench()
    configs = [triton.Config({"BLOCK": b}, num_warps=1, pre_hook=_raise_key_error) for b in (16, 32)]
    tuner = tdl.autotune(key=["n"], configs=configs, do_bench=bench)(add_kernel)
    with pytest.raises(RuntimeError) as info:
        run_add(tuner)
    assert isinstance(info.value, tdl.AutotuningError) and isinstance(info.value, KeyError)


def _raise_key_error(nargs):
    raise KeyError("BLOCK")


def test_a_pre_hook_passed_with_a_passthrough_call_gets_the_named_arguments():
    """triton-dejavu's configuration passthrough takes ``pre_hook=`` in the call: it is called with
    the arguments by name and not passed on to Triton's launch (which rejects an unknown keyword on a
    GPU and drops it under the interpreter)."""
    launched: list[dict] = []

    class Recording:
        def __init__(self, fn):
            self.fn, self.arg_names = fn, fn.arg_names

        def run(self, *args, **kwargs):
            launched.append(kwargs)
            return self.fn.run(*args, **kwargs)

    bench = Bench()
    tuner = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench)(Recording(add_kernel))
    seen: list[dict] = []
    x, y, out = torch.arange(50.0), torch.ones(50), torch.empty(50)
    tuner[(4,)](x, y, out, 50, BLOCK=16, pre_hook=seen.append)
    assert torch.equal(out, x + y) and not bench.timed
    assert len(seen) == 1 and seen[0]["x_ptr"] is x and (seen[0]["n"], seen[0]["BLOCK"]) == (50, 16)
    assert "pre_hook" not in seen[0] and "pre_hook" not in launched[-1]


# --- jitcache -----------------------------------------------------------------------------------------------


def test_use_jitcache_is_accepted_and_changes_nothing():
    bench = Bench()
    tuner = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench, use_jitcache=True)(add_kernel)
    run_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 32}


def test_jitcache_decorator_is_accepted_under_autotune():
    bench = Bench()
    assert tdl.global_cache_lock.lock() is None and tdl.global_cache_lock.unlock() is None
    cached = tdl.jitcache(
        check_keys=["BLOCK"],
        check_specialization=["n"],
        cache_lock=tdl.global_cache_lock,
        cache_launch_grid=False,
        assume_const=None,
        autotuner_args=None,
    )(add_kernel)
    tuner = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench)(cached)
    run_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 32}


def test_jitcache_checks_its_names():
    with pytest.raises(ValueError, match=r"check_keys.*'NOPE'"):
        tdl.jitcache(check_keys=["NOPE"], check_specialization=[])(add_kernel)


def test_disable_jitcache_returns_the_kernel_itself(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_DISABLE_JITCACHE", "1")
    assert tdl.jitcache(check_keys=["BLOCK"], check_specialization=[])(add_kernel) is add_kernel


# --- unknown keywords ---------------------------------------------------------------------------------------


def test_a_misspelt_keyword_names_the_right_one():
    with pytest.raises(TypeError, match=r"'quantile'.*did you mean 'quantiles'"):
        tdl.autotune(key=["n"], configs=Bench().configs(), quantile=(0.5,))


# --- ConfigSpace -------------------------------------------------------------------------------------------


def test_config_space_lists_configs_in_dejavu_order():
    """triton-dejavu crosses the kwargs in the order given, then the Config fields in alphabetical
    order (num_stages before num_warps) whatever order they were passed in: the same list, so the
    same tie-break, the same input to early_config_prune and the same ``kernel.configs``."""
    space = tdl.ConfigSpace({"BLOCK": [16, 32]}, num_warps=[4, 8], num_stages=[1, 2])
    listed = [(c.kwargs["BLOCK"], c.num_stages, c.num_warps) for c in space.generate_config_list()]
    assert listed == [(b, s, w) for b in (16, 32) for s in (1, 2) for w in (4, 8)]


def test_config_space_has_dejavu_attributes():
    hook = lambda nargs: None  # noqa: E731
    space = tdl.ConfigSpace({"BLOCK": [16, 32], "GROUP": [1]}, num_warps=[4, 8], pre_hook=hook)
    assert space.kwargs == {"BLOCK": [16, 32], "GROUP": [1]}
    assert space.kwarg_keys == ["BLOCK", "GROUP"]
    assert space.num_warps == [4, 8]
    assert space.num_stages == [triton.Config({}).num_stages], "a field not given: [its default]"
    assert space.get_global_pre_hook() is hook
    with pytest.raises(AttributeError, match="build a new ConfigSpace"):
        space.num_warps = [16]


def test_generate_config_list_returns_a_new_list():
    space = tdl.ConfigSpace({"BLOCK": [16, 32]})
    listed = space.generate_config_list()
    listed.append(triton.Config({"BLOCK": 64}))
    assert [c.kwargs["BLOCK"] for c in space.generate_config_list()] == [16, 32]
    tuner = tdl.autotune(key=["n"], config_space=space)(add_kernel)
    assert blocks_of(tuner.configs) == [16, 32]


def test_config_space_pre_hook_third_as_before_dejavu_0_7_5_is_a_clear_error():
    with pytest.raises(TypeError, match="pass pre_hook= by keyword"):
        tdl.ConfigSpace({"BLOCK": [16]}, [lambda kw: True], lambda nargs: None)


# --- environment variables ---------------------------------------------------------------------------------


def test_storage_and_tag_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", str(tmp_path / "root"))
    monkeypatch.setenv("TRITON_DEJAVU_TAG", "deploy-a")
    tuner = _tune_once()
    path = tuner.cache_path()
    assert path.is_file()
    assert str(path).startswith(str(tmp_path / "root")) and "deploy-a" in path.parts


#: The folders triton-dejavu writes a kernel's cache file in, by release (``get_storage_identifier``
#: and ``_get_folder_name`` of each); ``{kernel}`` is the kernel's folder.
DEJAVU_TREES = {
    "0.7": "dejavu_0.7/triton_3.2.0/cuda_12.4/gpu_NVIDIA_H100_80GB_HBM3/{kernel}/autotune_config-1a/"
    "code_version-2b/tune_features-3c/kernel_configs-4d/default",
    "0.7.0": "dejavu_0.7/cuda_12.4/triton_3.2.0/gpu_NVIDIA_H100_80GB_HBM3/{kernel}/autotune_config-1a/"
    "code_version-2b/tune_features-3c/kernel_configs-4d/default",
    "0.6": "dejavu_0.6/cuda_12.4/torch_2.5.1+cu124/triton_3.1.0/gpu_NVIDIA_H100_80GB_HBM3/{kernel}/"
    "autotune_config-1a/code_version-2b/tune_features-3c/kernel_configs-4d/default",
    "0.5.2": "dejavu_0.5/cuda_12.4/torch_2.4.0+cu121/triton_3.0.0/gpu_NVIDIA_H100_80GB_HBM3/{kernel}/"
    "autotune_config-1a/kernel_configs-4d/code_version-2b/default",
    "0.5.0": "dejavu_0.5/cuda_12.1/torch_2.3.0/triton_2.3.0/gpu_NVIDIA_A100/{kernel}-"
    + "e" * 64
    + "/default",
}


def _dejavu_tree(root, kernel="add_kernel", release="0.7", folder=None):
    """A triton-dejavu cache file of ``kernel`` under ``root``, at the path that release writes."""
    path = root / DEJAVU_TREES[release].format(kernel=folder or kernel)
    path.mkdir(parents=True)
    key = "('100', 'torch.float32', 'torch.float32', 'torch.float32')"
    doc = {"signature": f"JITFunction(compat_helpers:{kernel})", "cache": {key: "BLOCK: 64, num_warps: 1"}}
    (path / "cache.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("release", list(DEJAVU_TREES))
def test_triton_dejavu_results_in_the_storage_root_are_named_with_the_import_command(tmp_path, release):
    """triton-dejavu's files under TRITON_DEJAVU_STORAGE are not read: without a word, a switching
    user's kernels were tuned again (or answered by the fallback in production). One warning per
    kernel says so and gives the import-dejavu command; none once results of ours are stored. Every
    layout triton-dejavu has written (0.5 to 0.7) is found."""
    root = Path(os.environ["TRITON_DEJAVU_STORAGE"])
    _dejavu_tree(root, release=release)
    _dejavu_tree(root, kernel="other_kernel", release=release)
    _dejavu_tree(root, kernel="my_add_kernel", release=release)  # a name that ends like it
    with pytest.warns(tdl.DejavuStorageWarning) as caught:
        _tune_once()
    texts = [str(w.message) for w in caught if issubclass(w.category, tdl.DejavuStorageWarning)]
    assert len(texts) == 1
    assert "1 triton-dejavu cache file" in texts[0]
    assert f"import-dejavu {root} --kernel compat_helpers:add_kernel" in texts[0]
    forget_warnings()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tdl.DejavuStorageWarning)
        tuner = _tune_once()  # a later process: its own result is restored, nothing to say
    assert tuner.last_decision == "restored"


def test_the_triton_dejavu_files_of_a_kernel_made_in_a_function_are_found(tmp_path):
    """triton-dejavu names the folder of a kernel defined in a function by its qualified name."""
    root = Path(os.environ["TRITON_DEJAVU_STORAGE"])
    _dejavu_tree(root, folder="make.<locals>.add_kernel")
    with pytest.warns(tdl.DejavuStorageWarning, match="1 triton-dejavu cache file"):
        _tune_once()


def test_force_fallback_uses_fallback_heuristic(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    bench = Bench()
    keys = []

    def heuristic(key):
        keys.append(key)
        return triton.Config({"BLOCK": 16}, num_warps=1)

    tuner = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench, fallback_heuristic=heuristic)(
        add_kernel
    )
    run_add(tuner)
    assert keys == [key_for(100)] and bench.timed == []


def test_use_only_restored_restricts_a_new_tuning_to_restored_winners(monkeypatch):
    _tune_once()
    monkeypatch.setenv("TRITON_DEJAVU_USE_ONLY_RESTORED", "1")
    bench = Bench()
    tuner = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench)(add_kernel)
    run_add(tuner, 60)
    assert bench.timed == []  # the only restored winner is used without a benchmark
    assert tuner.best_config.kwargs == {"BLOCK": 32}


def test_hash_search_params_zero_shares_results_between_search_settings(monkeypatch):
    def paths():
        exhaustive = tdl.autotune(key=["n"], configs=Bench().configs())(add_kernel)
        random = tdl.autotune(
            key=["n"], configs=Bench().configs(), use_random_search=True, search_max_search_t=5
        )(add_kernel)
        return exhaustive.cache_path(), random.cache_path()

    a, b = paths()
    assert a != b  # default (1): the search settings are part of the identity
    monkeypatch.setenv("TRITON_DEJAVU_HASH_SEARCH_PARAMS", "0")
    a, b = paths()
    assert a == b


def test_split_cache_is_accepted_with_a_warning_and_leaves_the_environment_alone(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_SPLIT_CACHE", "1")
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    monkeypatch.delenv("TRITON_DEJAVU_INSTANCE_RUN_ID", raising=False)
    before = dict(os.environ)
    with pytest.warns(tdl.DejavuConfigWarning, match="TRITON_DEJAVU_SPLIT_CACHE.*TRITON_CACHE_DIR"):
        tuner = _tune_once()
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    assert dict(os.environ) == before


def test_instance_run_id_is_neither_read_nor_written(monkeypatch):
    monkeypatch.delenv("TRITON_DEJAVU_INSTANCE_RUN_ID", raising=False)
    bench = Bench()
    tuner = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench)(add_kernel)
    run_add(tuner)
    first = tuner.cache_path()
    assert "TRITON_DEJAVU_INSTANCE_RUN_ID" not in os.environ
    monkeypatch.setenv("TRITON_DEJAVU_INSTANCE_RUN_ID", "123-4")
    assert tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench)(add_kernel).cache_path() == first


@pytest.mark.parametrize("variable", ["TRITON_DEJAVU_DEBUG", "TRITON_DEJAVU_DEBUG_DEBUG"])
def test_debug_variables_turn_on_debug_logging(variable):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_DEJAVU_DEBUG")}
    env[variable] = "1"
    code = "import logging, triton_dejavu_like; print(logging.getLogger('triton_dejavu_like').level)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "10"


def test_print_autotuning_prints_one_line_per_decision(monkeypatch, capsys):
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")  # knobs read it at each access (3.4+)
    _tune_once()
    out = capsys.readouterr().out
    assert out.count("Triton autotuning for function add_kernel") == 1 and "best config selected" in out


def test_a_restored_result_launches_correctly():
    _tune_once()
    bench = Bench()
    tuner = tdl.autotune(key=["n"], configs=bench.configs(), do_bench=bench)(add_kernel)
    assert torch.equal(run_add(tuner), torch.arange(100, dtype=torch.float32) + 1)
    assert bench.timed == [] and tuner.best_config.kwargs == {"BLOCK": 32}
