"""``import-dejavu``: triton-dejavu's string-encoded keys and configs, parsed strictly, never evaluated."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import textwrap
from pathlib import Path

import pytest
import torch
import triton
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_helpers import deny_opens, stored_entries

from triton_dejavu_like import DejavuStorageWarning
from triton_dejavu_like import store as storage
from triton_dejavu_like._compat import CONFIG_FIELDS
from triton_dejavu_like.codec import config_id
from triton_dejavu_like.store import identity, layout
from triton_dejavu_like.tools import cli, dejavu_import
from triton_dejavu_like.tools.dejavu_import import FormatError, parse_config, parse_key

# --- the parsers ----------------------------------------------------------------------------------------


def test_parse_key_gives_back_typed_values():
    assert parse_key("('1024', '512', 'torch.float16', 'True', '-3', '0.5', 'None')") == (
        1024, 512, "torch.float16", True, -3, 0.5, None,
    )  # fmt: skip
    assert parse_key("(1024, 'torch.float32')") == (1024, "torch.float32")  # older files kept the types
    assert parse_key("()") == ()


@given(
    st.lists(
        st.one_of(st.integers(), st.sampled_from(["torch.float16", "torch.bfloat16", "fp32"])), max_size=6
    )
)
@settings(deadline=None)
def test_parse_key_reads_what_triton_dejavu_writes(key):
    written = str(tuple(str(v) for v in key))  # triton-dejavu stores str() of every element
    assert parse_key(written) == tuple(key)


def test_parse_config_reads_a_triton_config_string():
    config, dropped = parse_config(
        "BLOCK_M: 64, BLOCK_N: 64, num_warps: 4, num_ctas: 1, num_stages: 3, maxnreg: None"
    )
    assert config.kwargs == {"BLOCK_M": 64, "BLOCK_N": 64}
    assert (config.num_warps, config.num_ctas, config.num_stages) == (4, 1, 3)
    assert dropped == ([] if "maxnreg" in CONFIG_FIELDS else ["maxnreg"])


def test_parse_config_drops_fields_of_other_triton_releases():
    text = "BLOCK: 32, num_warps: 8, num_stages: 2, enable_warp_specialization: False, pre_hook: None"
    config, dropped = parse_config(text)
    assert config.kwargs == {"BLOCK": 32} and dropped == ["enable_warp_specialization"]


@given(
    st.dictionaries(
        st.from_regex(r"[A-Z][A-Z_]{0,8}", fullmatch=True).filter(lambda n: n not in CONFIG_FIELDS),
        st.one_of(st.integers(-(2**40), 2**40), st.booleans(), st.sampled_from(["relu", "fp16"])),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([1, 2, 4, 8, 16]),
    st.integers(1, 6),
)
@settings(deadline=None)
def test_parse_config_inverts_str_of_a_triton_config(kwargs, num_warps, num_stages):
    config = triton.Config(kwargs, num_warps=num_warps, num_stages=num_stages)
    parsed, _ = parse_config(str(config))
    assert config_id(parsed) == config_id(config)


@pytest.mark.parametrize(
    "text",
    [
        "BLOCK: __import__('os').system('touch /tmp/pwned')",
        "BLOCK: (lambda: 1)()",
        "BLOCK: [1, 2]",
        "BLOCK 64",
        "BLOCK: 64, BLOCK: 32",
        "num_warps: 'four'",
        "",
        "x" * 20_000,
    ],
)
def test_parse_config_refuses_anything_but_name_literal_pairs(text):
    with pytest.raises(FormatError):
        parse_config(text)


@pytest.mark.parametrize("text", ["__import__('os').getcwd()", "[1, 2]", "('a',) + ('b',)", "(1,"])
def test_parse_key_refuses_anything_but_a_tuple_of_literals(text):
    with pytest.raises(FormatError):
        parse_key(text)


# --- the command ----------------------------------------------------------------------------------------

MODULE = """
import triton
import triton.language as tl

import triton_dejavu_like as tdl

BENCHMARKS = []


def bench(kernel_call, quantiles=(0.5, 0.2, 0.8)):
    BENCHMARKS.append(1)
    return [1.0, 1.0, 1.0]


@tdl.autotune(
    key=["n"],
    configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32) for w in (2, 4)],
    do_bench=bench,
)
@triton.jit
def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3, mask=mask)
"""

F32 = "torch.float32"


def dejavu_doc(cache: dict[str, str], timings: dict[str, object]) -> dict:
    return {
        "signature": "JITFunction(mykernels:scale)",
        "total_bench_time_s": 3.5,
        "total_configs": 4,
        "current_eval": {},
        "keys": ["n"],
        "cache": cache,
        "timings": timings,
        "timings_data": {"labels": ["ms", "min_ms", "max_ms"], "rep_t_ms": 100, "warmup_t_ms": 25},
    }


def key_text(n: int) -> str:
    return str((str(n), F32, F32))


def config_text(block: int, warps: int) -> str:
    """What triton-dejavu writes for a config of the kernel (``str()`` of a Config of this Triton:
    its fields and their defaults differ between releases)."""
    return str(triton.Config({"BLOCK": block}, num_warps=warps))


@pytest.fixture
def kernel_spec(tmp_path) -> str:
    module = tmp_path / "mykernels.py"
    module.write_text(textwrap.dedent(MODULE))
    return f"{module}:scale"


def write_dejavu(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=4))
    return path


def test_imported_results_are_restored_without_tuning(tmp_path, kernel_spec, capsys):
    source = write_dejavu(
        tmp_path / "old" / "cache.json",
        dejavu_doc(
            {key_text(100): config_text(32, 4), key_text(200): config_text(16, 2)},
            {key_text(100): [0.5, 0.45, 0.55], key_text(200): {"values": [0.7], "lables": ["ms"]}},
        ),
    )
    root = tmp_path / "root"
    assert cli.main(["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(root)]) == 0
    assert "imported 2 keys from 1 triton-dejavu file(s)" in capsys.readouterr().out
    tuner = dejavu_import.load_tuner(kernel_spec)
    tuner.settings = dataclasses.replace(tuner.settings, custom_data_storage=root)
    entries = stored_entries(tuner.cache_path())
    assert {e["key"][0]: e["config"]["kwargs"]["BLOCK"] for e in entries.values()} == {100: 32, 200: 16}
    assert {e["strategy"] for e in entries.values()} == {dejavu_import.STRATEGY}
    for n, block in ((100, 32), (200, 16)):
        x = torch.arange(n, dtype=torch.float32)
        out = torch.empty_like(x)
        tuner[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        assert torch.equal(out, x * 3)
        assert tuner.last_decision == "restored" and tuner.best_config.kwargs == {"BLOCK": block}
    assert tuner.settings.timing.do_bench.__globals__["BENCHMARKS"] == []  # the module's do_bench never ran


def test_the_platform_and_tag_come_from_the_triton_dejavu_path(tmp_path, kernel_spec):
    tree = tmp_path / "dejavu-data"
    path = (
        tree / "dejavu_0.7" / "cuda_12.4" / "torch_2.5.1+cu124" / "triton_3.2.0" / "gpu_NVIDIA H100 80GB HBM3"
        / "scale" / "autotune_config-aa" / "code_version-bb" / "tune_features-cc" / "kernel_configs-dd"
        / "nightly" / "cache.json"
    )  # fmt: skip
    write_dejavu(path, dejavu_doc({key_text(64): config_text(16, 4)}, {key_text(64): [0.1, 0.1, 0.1]}))
    root = tmp_path / "root"
    assert cli.main(["import-dejavu", str(tree), "--kernel", kernel_spec, "--root", str(root)]) == 0
    [written] = list(root.rglob("cache.json"))
    doc = storage.read_document(written)
    assert {k: doc.identity[k] for k in ("triton", "toolchain", "gpu", "kernel", "tag")} == {
        "triton": "3.2.0",
        "toolchain": "cuda_12.4",
        "gpu": "NVIDIA_H100_80GB_HBM3",
        "kernel": "scale",
        "tag": "nightly",
    }
    assert written.parent.name == "nightly" and "triton_3.2.0" in written.parts


def test_keys_that_cannot_be_converted_are_skipped_and_reported(tmp_path, kernel_spec, capsys, monkeypatch):
    payload = "__import__('pathlib').Path('PWNED').touch()"
    source = write_dejavu(
        tmp_path / "cache.json",
        dejavu_doc(
            {
                key_text(1): config_text(64, 4),  # not one of the kernel's configs
                key_text(2): config_text(16, 4),  # no timing
                key_text(3): payload,
                payload: config_text(16, 4),
                key_text(4): config_text(32, 2),
            },
            {key_text(1): [1.0], key_text(3): [1.0], payload: [1.0], key_text(4): [float("inf")], "x": 1},
        ),
    )
    root = tmp_path / "root"
    monkeypatch.chdir(tmp_path)  # where the payload would create its file
    assert (
        cli.main(["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(root), "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)[kernel_spec]
    assert out["imported"] == 0 and len(out["skipped"]) == 5
    reasons = " ".join(s["reason"] for s in out["skipped"])
    assert "not among the kernel's configs" in reasons and "no timing" in reasons and "not finite" in reasons
    assert not (tmp_path / "PWNED").exists()
    assert not root.exists()


def test_a_key_that_does_not_fit_the_kernels_is_skipped(tmp_path, kernel_spec, capsys):
    """The kernel's key is ``n`` then the dtypes of its two tensors: ``('5', '5', '5')`` cannot be one
    of its keys (stored, it would make the kernel's keys differ in length for ``heuristic``)."""
    bad = str(("5", "5", "5"))
    too_long = str(("5", *[F32] * 5))  # five dtypes for a kernel of four arguments
    source = write_dejavu(
        tmp_path / "cache.json",
        dejavu_doc(
            {key_text(5): config_text(16, 4), bad: config_text(16, 4), too_long: config_text(16, 4)},
            {key_text(5): [1.0], bad: [1.0], too_long: [1.0]},
        ),
    )
    argv = ["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(tmp_path / "root"), "--json"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)[kernel_spec]
    assert out["imported"] == 1
    assert sorted(s["key"] for s in out["skipped"]) == sorted([bad, too_long])
    assert all("does not fit this kernel's" in s["reason"] for s in out["skipped"])


@pytest.mark.parametrize("timing", ["fast", [], True, [1.0, "x"], None])
def test_timings_that_are_not_times_are_named_as_such(tmp_path, kernel_spec, capsys, timing):
    doc = dejavu_doc({key_text(5): config_text(16, 4)}, {key_text(5): timing})
    source = write_dejavu(tmp_path / "cache.json", doc)
    argv = ["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(tmp_path / "root"), "--json"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)[kernel_spec]
    assert out["imported"] == 0
    assert [s["reason"][:41] for s in out["skipped"]] == ["timings are not a time or a list of times"]


def test_counts_say_what_was_written_or_would_be(tmp_path, kernel_spec, capsys, monkeypatch):
    source = write_dejavu(
        tmp_path / "cache.json", dejavu_doc({key_text(5): config_text(16, 4)}, {key_text(5): [1.0]})
    )
    argv = ["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(tmp_path / "root"), "--json"]
    assert cli.main([*argv, "--dry-run"]) == 0
    dry = json.loads(capsys.readouterr().out)[kernel_spec]
    assert dry["imported"] == 1 and len(dry["written"]) == 1  # the file it would write
    monkeypatch.setattr(storage.CacheFile, "update", lambda self, change: False)  # cannot be written
    assert cli.main(argv) == 1
    failed = json.loads(capsys.readouterr().out)[kernel_spec]
    assert failed["imported"] == 0 and failed["written"] == []


def test_a_huge_timing_skips_its_key_and_the_others_are_imported(tmp_path, kernel_spec, capsys):
    doc = dejavu_doc(
        {key_text(1): config_text(16, 4), key_text(2): config_text(16, 4)},
        {key_text(1): [10**400], key_text(2): [1.0]},
    )
    source = write_dejavu(tmp_path / "cache.json", doc)
    argv = ["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(tmp_path / "root"), "--json"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)[kernel_spec]
    assert out["imported"] == 1 and [s["key"] for s in out["skipped"]] == [key_text(1)]


def test_files_of_other_kernels_are_left_out(tmp_path, kernel_spec, capsys):
    doc = dejavu_doc({key_text(1): config_text(16, 4)}, {key_text(1): [1.0]})
    doc["signature"] = "JITFunction(other.module:matmul)"
    source = write_dejavu(tmp_path / "cache.json", doc)
    assert (
        cli.main(["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(tmp_path / "r")]) == 0
    )
    assert "made for kernel 'matmul'" in capsys.readouterr().out


def test_existing_results_win_unless_overwrite(tmp_path, kernel_spec, capsys):
    root = tmp_path / "root"
    first = write_dejavu(
        tmp_path / "a" / "cache.json", dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [1.0]})
    )
    second = write_dejavu(
        tmp_path / "b" / "cache.json", dejavu_doc({key_text(5): config_text(32, 4)}, {key_text(5): [1.0]})
    )
    args = ["--kernel", kernel_spec, "--root", str(root)]
    assert cli.main(["import-dejavu", str(first), *args]) == 0
    assert cli.main(["import-dejavu", str(second), *args]) == 0
    [path] = list(root.rglob("cache.json"))
    assert [e["config"]["kwargs"]["BLOCK"] for e in stored_entries(path).values()] == [16]
    capsys.readouterr()
    assert cli.main(["import-dejavu", str(second), *args, "--overwrite", "--dry-run"]) == 0
    assert f"would replace 1 stored entries in {path}" in capsys.readouterr().out
    assert [e["config"]["kwargs"]["BLOCK"] for e in stored_entries(path).values()] == [16]
    assert cli.main(["import-dejavu", str(second), *args, "--overwrite"]) == 0
    assert f"  replaced 1 stored entries in {path}" in capsys.readouterr().out
    assert [e["config"]["kwargs"]["BLOCK"] for e in stored_entries(path).values()] == [32]


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)], ids=["import", "dry run"])
def test_a_destination_of_another_identity_is_reported_not_imported(tmp_path, kernel_spec, capsys, dry_run):
    source = write_dejavu(
        tmp_path / "a" / "cache.json", dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [1.0]})
    )
    args = [str(source), "--kernel", kernel_spec, "--root", str(tmp_path / "root")]
    assert cli.main(["import-dejavu", *args]) == 0
    [path] = list((tmp_path / "root").rglob("cache.json"))
    doc = json.loads(path.read_text())
    doc["identity"]["code_version"] = "f" * 16  # a file this kernel's results must not go into
    path.write_text(json.dumps(doc))
    squatter = path.read_bytes()
    capsys.readouterr()
    assert cli.main(["import-dejavu", *args, "--overwrite", *dry_run]) == 1  # a dry run says the same
    captured = capsys.readouterr()
    assert "another identity" in captured.err and " 0 keys from 1 triton-dejavu file" in captured.out
    assert path.read_bytes() == squatter


def damage(path: Path, how: str) -> None:
    """Make a stored cache file invalid ("corrupt") or add an invalid entry to it ("invalid entry")."""
    if how == "corrupt":
        path.write_bytes(b"{ not json")
        return
    doc = json.loads(path.read_text())
    [(kid, entry)] = doc["entries"].items()
    doc["entries"][kid.replace("5", "6")] = {**entry, "timings_ms": ["fast"]}
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("how", ["corrupt", "invalid entry"])
@pytest.mark.parametrize("dry_run", [False, True], ids=["import", "dry run"])
def test_a_damaged_destination_is_set_aside_and_a_dry_run_says_so(
    tmp_path, kernel_spec, capsys, how, dry_run
):
    """The import sets a damaged destination (or its invalid entries) aside, as any write does; its
    dry run must say that it would, and touch nothing (as merge --dry-run does)."""
    source = write_dejavu(
        tmp_path / "a" / "cache.json", dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [1.0]})
    )
    args = [str(source), "--kernel", kernel_spec, "--root", str(tmp_path / "root")]
    assert cli.main(["import-dejavu", *args]) == 0
    [path] = list((tmp_path / "root").rglob("cache.json"))
    damage(path, how)
    before = {p.name: p.read_bytes() for p in path.parent.iterdir()}
    expected = {
        (False, "corrupt"): "moved it to cache.json.corrupt-",
        (False, "invalid entry"): "moved 1 invalid entries",
        (True, "corrupt"): "is unreadable .*: an import would set it aside",
        (True, "invalid entry"): "holds 1 invalid entries: an import would move them aside",
    }[dry_run, how]
    with pytest.warns(DejavuStorageWarning, match=expected):
        assert cli.main(["import-dejavu", *args, *(["--dry-run"] if dry_run else [])]) == 0
    if dry_run:
        assert {p.name: p.read_bytes() for p in path.parent.iterdir()} == before
    else:
        assert [e["config"]["kwargs"]["BLOCK"] for e in stored_entries(path).values()] == [16]


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)], ids=["import", "dry run"])
def test_a_destination_that_cannot_be_read_is_reported_not_imported(
    tmp_path, kernel_spec, capsys, monkeypatch, dry_run
):
    source = write_dejavu(
        tmp_path / "a" / "cache.json", dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [1.0]})
    )
    root = tmp_path / "root"
    args = [str(source), "--kernel", kernel_spec, "--root", str(root)]
    assert cli.main(["import-dejavu", *args]) == 0
    [path] = list(root.rglob("cache.json"))
    stored = path.read_bytes()
    capsys.readouterr()
    deny_opens(monkeypatch, root, errno.EACCES, writes_only=False)
    assert cli.main(["import-dejavu", *args, *dry_run]) == 1  # a dry run says the same
    captured = capsys.readouterr()
    assert (
        "cannot read or create the destination" in captured.err
        and " 0 keys from 1 triton-dejavu file" in captured.out
    )
    assert path.read_bytes() == stored


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kernel", "no_such_module_xyz:scale"], "cannot load --kernel"),
        (["--kernel", "os:path"], "not a kernel decorated with triton_dejavu_like.autotune"),
        (["--kernel", "scale"], "MODULE:NAME"),
        (["--kernel", "{tmp}/broken.py:scale"], "SyntaxError"),
    ],
)
def test_a_bad_kernel_argument_is_a_clear_error(tmp_path, capsys, argv, message):
    source = write_dejavu(tmp_path / "cache.json", dejavu_doc({}, {}))
    (tmp_path / "broken.py").write_text("def scale(:\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert cli.main(["import-dejavu", str(source), *argv, "--root", str(tmp_path / "r")]) == 2
    assert message in capsys.readouterr().err


def test_a_bad_second_kernel_argument_writes_nothing(tmp_path, kernel_spec, capsys):
    """Every --kernel is loaded before anything is written: the first kernel's keys were imported,
    unreported, before the second one's error."""
    source = write_dejavu(
        tmp_path / "a" / "cache.json", dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [1.0]})
    )
    root = tmp_path / "root"
    argv = ["import-dejavu", str(source), "--kernel", kernel_spec, "--kernel", "no_such_module_xyz:scale"]
    assert cli.main([*argv, "--root", str(root)]) == 2
    assert "cannot load --kernel no_such_module_xyz:scale" in capsys.readouterr().err
    assert not list(root.rglob("cache.json"))


def test_an_unreadable_triton_dejavu_file_is_an_error(tmp_path, kernel_spec, capsys):
    bad = tmp_path / "cache.json"
    bad.write_text('{"cache": ')
    assert cli.main(["import-dejavu", str(bad), "--kernel", kernel_spec, "--root", str(tmp_path / "r")]) == 1
    assert str(bad) in capsys.readouterr().err
    assert cli.main(["import-dejavu", str(tmp_path / "missing"), "--kernel", kernel_spec]) == 2


def test_the_platform_defaults_to_this_machine(tmp_path, kernel_spec):
    source = write_dejavu(
        tmp_path / "x" / "cache.json", dejavu_doc({key_text(7): config_text(16, 4)}, {key_text(7): [1.0]})
    )
    root = tmp_path / "root"
    assert cli.main(["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(root)]) == 0
    [written] = list(root.rglob("cache.json"))
    here = identity.detect_platform(True)
    assert storage.read_document(written).identity["toolchain"] == here.toolchain


H100 = "NVIDIA_H100_80GB_HBM3"
HASHES_0_7 = "autotune_config-aa/code_version-bb/tune_features-cc/kernel_configs-dd"


def imported_platform(tmp_path: Path, kernel_spec: str, relative: str) -> dict[str, str]:
    """Import one file written at ``relative`` (under ``tmp_path/src``) and give the platform and tag
    of the cache file it went to."""
    source = tmp_path / "src"
    write_dejavu(source / relative, dejavu_doc({key_text(64): config_text(16, 4)}, {key_text(64): [0.1]}))
    root = tmp_path / "root"
    assert cli.main(["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(root)]) == 0
    [written] = list(root.rglob("cache.json"))
    doc = storage.read_document(written)
    return {k: doc.identity[k] for k in ("triton", "toolchain", "gpu", "tag")}


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        (  # 0.7.0 wrote the toolchain first
            f"dejavu_0.7/cuda_12.4/triton_3.2.0/gpu_{H100}/scale/{HASHES_0_7}/prod/cache.json",
            ("3.2.0", "cuda_12.4", H100, "prod"),
        ),
        (
            f"dejavu_0.6/cuda_12.4/torch_2.5.1+cu124/triton_3.1.0/gpu_{H100}/scale/{HASHES_0_7}/prod/cache.json",
            ("3.1.0", "cuda_12.4", H100, "prod"),
        ),
        (  # 0.5.2-0.5.x: kernel_configs before code_version, no tune_features
            f"dejavu_0.5/cuda_12.4/torch_2.4.0/triton_3.0.0/gpu_{H100}/scale/autotune_config-aa/"
            "kernel_configs-dd/code_version-bb/prod/cache.json",
            ("3.0.0", "cuda_12.4", H100, "prod"),
        ),
        (  # 0.5.0-0.5.1: <kernel>-<hash>/<tag>
            f"dejavu_0.5/cuda_12.1/torch_2.3.0/triton_2.3.0/gpu_{H100}/scale-{'e' * 64}/prod/cache.json",
            ("2.3.0", "cuda_12.1", H100, "prod"),
        ),
    ],
    ids=["0.7.0", "0.6", "0.5.2", "0.5.0"],
)
def test_every_triton_dejavu_layout_gives_its_platform_and_tag(tmp_path, kernel_spec, relative, expected):
    got = imported_platform(tmp_path, kernel_spec, relative)
    assert (got["triton"], got["toolchain"], got["gpu"], got["tag"]) == expected


@pytest.mark.parametrize("above", ["mnt/gpu_cache/dejavu", "home/me/triton_3.1_experiments/cuda_11.8/store"])
def test_folders_above_the_triton_dejavu_tree_are_not_read_as_its_platform(tmp_path, kernel_spec, above):
    """A storage root such as /mnt/gpu_cache/dejavu named the GPU 'cache'."""
    relative = f"{above}/dejavu_0.7/triton_3.2.0/cuda_12.4/gpu_{H100}/scale/{HASHES_0_7}/default/cache.json"
    got = imported_platform(tmp_path, kernel_spec, relative)
    assert (got["triton"], got["toolchain"], got["gpu"]) == ("3.2.0", "cuda_12.4", H100)


def test_a_gpu_name_with_punctuation_maps_to_the_name_the_tuner_uses(tmp_path, kernel_spec):
    """triton-dejavu replaced ' ' and '/' by '_' in the device name; the tuner sanitises the live
    name ``AMD Radeon PRO W7900 (gfx1100)``: both must give one folder."""
    gpu = "gpu_AMD_Radeon_PRO_W7900_(gfx1100)"
    relative = f"dejavu_0.7/triton_3.2.0/rocm_6.2.4/{gpu}/scale/{HASHES_0_7}/default/cache.json"
    got = imported_platform(tmp_path, kernel_spec, relative)
    assert got["gpu"] == identity.sanitize("AMD Radeon PRO W7900 (gfx1100)")


def test_the_torch_cuda_fallback_folder_is_this_packages_cuda_folder(tmp_path, kernel_spec):
    """Without Triton's ptxas, triton-dejavu names the toolchain after torch's CUDA: cuda_torch_12.4,
    which is what this package calls cuda_12.4."""
    relative = f"dejavu_0.7/triton_3.2.0/cuda_torch_12.4/gpu_{H100}/scale/{HASHES_0_7}/default/cache.json"
    assert imported_platform(tmp_path, kernel_spec, relative)["toolchain"] == "cuda_12.4"


def test_the_suggested_command_leaves_this_packages_own_files_out(tmp_path, kernel_spec, capsys):
    """The tuner's warning suggests ``import-dejavu ROOT`` with ROOT also the destination: a second run
    (or a root with results of other kernels) read this package's own cache files as triton-dejavu
    files, reported them as unusable and exited 1."""
    root = tmp_path / "root"
    relative = f"dejavu_0.7/triton_3.2.0/cuda_12.4/gpu_{H100}/scale/{HASHES_0_7}/default/cache.json"
    write_dejavu(root / relative, dejavu_doc({key_text(64): config_text(16, 4)}, {key_text(64): [0.1]}))
    argv = ["import-dejavu", str(root), "--kernel", kernel_spec, "--root", str(root), "--json"]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)[kernel_spec]["imported"] == 1
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    again = json.loads(captured.out)[kernel_spec]
    assert (again["imported"], again["kept_existing"], again["own_files"]) == (0, 1, 1)
    assert again["problems"] == [] and captured.err == ""
    assert cli.main(argv[:-1]) == 0
    assert "1 cache file(s) of this package's own left out" in capsys.readouterr().out


HERE_CUDA = identity.Platform("3.6.0", "cuda_13.0", "NVIDIA_H200", "cuda", (9, 0))


def import_as_on(monkeypatch, here: identity.Platform, tmp_path, kernel_spec, platform_dirs, *extra):
    """Import one 0.7 file written under ``platform_dirs`` on a machine whose platform is ``here``;
    the JSON report and the platform stored."""
    monkeypatch.setattr(identity, "detect_platform", lambda interpreted: here)
    source = tmp_path / "src"
    relative = f"dejavu_0.7/{platform_dirs}/scale/{HASHES_0_7}/default/cache.json"
    write_dejavu(source / relative, dejavu_doc({key_text(64): config_text(16, 4)}, {key_text(64): [0.1]}))
    root = tmp_path / "root"
    argv = ["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(root), *extra]
    return argv, root


def stored_platform(root: Path) -> tuple[str, str, str]:
    [written] = list(root.rglob("cache.json"))
    ident = storage.read_document(written).identity
    return ident["triton"], ident["toolchain"], ident["gpu"]


def test_results_of_this_machines_triton_and_gpu_go_under_its_toolchain(
    tmp_path, kernel_spec, capsys, monkeypatch
):
    """triton-dejavu names the toolchain after Triton's ptxas (cuda_12.8), the tuner after torch's CUDA
    (cuda_13.0): results tuned on this machine's Triton and GPU were stored where it never looks."""
    argv, root = import_as_on(
        monkeypatch, HERE_CUDA, tmp_path, kernel_spec, "triton_3.6.0/cuda_12.8/gpu_NVIDIA_H200"
    )
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert stored_platform(root) == ("3.6.0", "cuda_13.0", "NVIDIA_H200")
    assert "tuned with cuda_12.8" in out and "stored under cuda_13.0, this machine's toolchain" in out
    assert "not this machine's" not in out
    assert cli.main([*argv, "--json", "--overwrite"]) == 0
    report = json.loads(capsys.readouterr().out)[kernel_spec]
    assert report["toolchains_replaced"] == [{"path": "cuda_12.8", "stored": "cuda_13.0"}]
    assert report["not_this_machine"] == []


@pytest.mark.parametrize(
    ("platform_dirs", "stored"),
    [
        ("triton_3.5.0/cuda_12.8/gpu_NVIDIA_H200", ("3.5.0", "cuda_12.8", "NVIDIA_H200")),  # another Triton
        ("triton_3.6.0/cuda_12.8/gpu_NVIDIA_H100", ("3.6.0", "cuda_12.8", "NVIDIA_H100")),  # another GPU
        ("triton_3.6.0/rocm_6.2/gpu_NVIDIA_H200", ("3.6.0", "rocm_6.2", "NVIDIA_H200")),  # another kind
    ],
)
def test_results_of_another_platform_keep_it_and_the_report_says_so(
    tmp_path, kernel_spec, capsys, monkeypatch, platform_dirs, stored
):
    argv, root = import_as_on(monkeypatch, HERE_CUDA, tmp_path, kernel_spec, platform_dirs)
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert stored_platform(root) == stored
    assert "which is not this machine's (triton 3.6.0, cuda_13.0, gpu NVIDIA_H200)" in out
    assert "--triton/--toolchain/--gpu" in out and "tuned with" not in out
    assert cli.main([*argv, "--json", "--dry-run"]) == 0
    report = json.loads(capsys.readouterr().out)[kernel_spec]
    assert report["not_this_machine"] == [dict(zip(("triton", "toolchain", "gpu"), stored))]
    assert report["this_machine"] == {"triton": "3.6.0", "toolchain": "cuda_13.0", "gpu": "NVIDIA_H200"}


def test_an_explicit_toolchain_wins(tmp_path, kernel_spec, capsys, monkeypatch):
    dirs = "triton_3.6.0/cuda_12.8/gpu_NVIDIA_H200"
    argv, root = import_as_on(monkeypatch, HERE_CUDA, tmp_path, kernel_spec, dirs, "--toolchain", "cuda_12.8")
    assert cli.main(argv) == 0
    assert stored_platform(root) == ("3.6.0", "cuda_12.8", "NVIDIA_H200")
    assert "not this machine's" in capsys.readouterr().out


def test_a_given_gpu_is_named_as_the_tuner_names_it(tmp_path, kernel_spec, capsys, monkeypatch):
    """``--gpu "NVIDIA H200"`` (as torch prints it) was stored with its spaces in the identity of a file
    at the tuner's path (gpu_NVIDIA_H200): the tuner took it for another identity's, restored nothing
    and never wrote it again."""
    dirs = "triton_3.6.0/cuda_12.8/gpu_other"
    argv, root = import_as_on(monkeypatch, HERE_CUDA, tmp_path, kernel_spec, dirs, "--gpu", "NVIDIA H200")
    assert cli.main([*argv, "--triton", "3.6.0", "--toolchain", " cuda_13.0"]) == 0
    assert stored_platform(root) == ("3.6.0", "cuda_13.0", "NVIDIA_H200")
    [written] = list(root.rglob("cache.json"))
    assert layout.cache_path(root, storage.read_document(written).identity) == written
    assert "not this machine's" not in capsys.readouterr().out
    tuner = dejavu_import.load_tuner(kernel_spec)
    restored = storage.CacheFile.for_identity(root, tuner.kernel_identity(HERE_CUDA).as_dict())
    assert len(restored.load(repair=False)) == 1


@pytest.mark.parametrize("value", ["", " ", "//"])
def test_a_given_platform_value_that_names_nothing_exits_2(tmp_path, kernel_spec, capsys, monkeypatch, value):
    argv, root = import_as_on(monkeypatch, HERE_CUDA, tmp_path, kernel_spec, "triton_3.6.0/cuda_12.8/gpu_x")
    assert cli.main([*argv, "--gpu", value]) == 2
    assert "--gpu" in capsys.readouterr().err and not root.exists()


TWO_KEYS = (
    MODULE.replace('key=["n"]', 'key=["n", "alpha"]')
    .replace("def scale(x_ptr, out_ptr, n, BLOCK", "def scale(x_ptr, out_ptr, n, alpha, BLOCK")
    .replace("* 3, mask=mask)", "* alpha, mask=mask)")
)


@pytest.fixture
def two_key_spec(tmp_path) -> str:
    module = tmp_path / "twokeys.py"
    module.write_text(textwrap.dedent(TWO_KEYS))
    return f"{module}:scale"


def test_a_file_keyed_in_another_order_is_restored_for_the_call_it_was_tuned_for(tmp_path, two_key_spec):
    """triton-dejavu tuned key=['alpha', 'n']; the kernel now has key=['n', 'alpha']: the values were
    imported as they were, and the result restored for a call that was never tuned (n=2, alpha=64)."""
    doc = dejavu_doc({str(("2", "64", F32, F32)): config_text(32, 4)}, {str(("2", "64", F32, F32)): [0.1]})
    doc["keys"] = ["alpha", "n"]
    source = write_dejavu(tmp_path / "src" / "cache.json", doc)
    root = tmp_path / "root"
    assert cli.main(["import-dejavu", str(source), "--kernel", two_key_spec, "--root", str(root)]) == 0
    tuner = dejavu_import.load_tuner(two_key_spec)
    tuner.settings = dataclasses.replace(tuner.settings, custom_data_storage=root)
    assert [e["key"][:2] for e in stored_entries(tuner.cache_path()).values()] == [[64, 2]]
    x = torch.arange(64, dtype=torch.float32)
    out = torch.empty_like(x)
    tuner[lambda meta: (triton.cdiv(64, meta["BLOCK"]),)](x, out, 64, 2)
    assert tuner.last_decision == "restored" and tuner.best_config.kwargs == {"BLOCK": 32}
    assert torch.equal(out, x * 2)


def test_a_file_tuned_with_another_key_is_skipped_with_the_reason(tmp_path, two_key_spec, capsys):
    """A file of key=['n', 'm'] (two values, then dtypes) fit the kernel's key ['n', 'alpha'] by shape
    and was imported: 'm' taken as 'alpha'."""
    doc = dejavu_doc({str(("100", "7", F32, F32)): config_text(32, 4)}, {str(("100", "7", F32, F32)): [0.1]})
    doc["keys"] = ["n", "m"]
    source = write_dejavu(tmp_path / "src" / "cache.json", doc)
    argv = ["import-dejavu", str(source), "--kernel", two_key_spec, "--root", str(tmp_path / "root")]
    assert cli.main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)[two_key_spec]
    assert report["imported"] == 0 and report["written"] == []
    assert report["skipped_files"] == [
        {"file": str(source), "reason": "tuned with key ['n', 'm'], not the kernel's ['n', 'alpha']"}
    ]
    assert cli.main(argv) == 0
    assert f"  skipped {source}: tuned with key ['n', 'm']" in capsys.readouterr().out


def two_versions(tmp_path: Path, old_doc: dict, new_doc: dict) -> Path:
    """A triton-dejavu tree holding one key under an old code version (modified a year ago, and
    after the new one in path order) and under the current one."""
    tree = tmp_path / "tree"
    base = f"dejavu_0.7/triton_3.2.0/cuda_12.4/gpu_{H100}/scale/autotune_config-aa"
    old = write_dejavu(
        tree / base / "code_version-ff/tune_features-cc/kernel_configs-dd/default/cache.json", old_doc
    )
    write_dejavu(
        tree / base / "code_version-00/tune_features-cc/kernel_configs-dd/default/cache.json", new_doc
    )
    year_ago = old.stat().st_mtime - 365 * 24 * 3600
    os.utime(old, (year_ago, year_ago))
    return tree


def stored_blocks(root: Path) -> list[int]:
    [path] = list(root.rglob("cache.json"))
    return [e["config"]["kwargs"]["BLOCK"] for e in stored_entries(path).values()]


def test_the_newest_file_wins_a_key_found_in_several_and_the_report_says_so(tmp_path, kernel_spec, capsys):
    """Old and new code_version folders of one kernel: the last path in sorted order (the stale one)
    won, silently."""
    tree = two_versions(
        tmp_path,
        dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [0.5]}),
        dejavu_doc({key_text(5): config_text(32, 4)}, {key_text(5): [0.1]}),
    )
    root = tmp_path / "root"
    assert cli.main(["import-dejavu", str(tree), "--kernel", kernel_spec, "--root", str(root), "--json"]) == 0
    assert stored_blocks(root) == [32]
    [conflict] = json.loads(capsys.readouterr().out)[kernel_spec]["conflicts"]
    assert conflict["keys"] == 1 and "code_version-00" in conflict["kept"] and conflict["why"] == "the newest"
    assert [Path(p).parts[-5] for p in conflict["others"]] == ["code_version-ff"]
    assert (
        cli.main(["import-dejavu", str(tree), "--kernel", kernel_spec, "--root", str(root), "--dry-run"]) == 0
    )
    assert "1 key(s) found in several files: kept those of " in capsys.readouterr().out


def test_a_file_of_the_kernels_module_wins_over_a_newer_one_of_another_module(tmp_path, kernel_spec, capsys):
    """Same-named kernels of two modules: the one whose signature names the kernel's module is kept."""
    ours = dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [0.5]})
    theirs = dejavu_doc({key_text(5): config_text(32, 4)}, {key_text(5): [0.1]})
    theirs["signature"] = "JITFunction(someone.else:scale)"
    tree = two_versions(tmp_path, ours, theirs)
    root = tmp_path / "root"
    assert cli.main(["import-dejavu", str(tree), "--kernel", kernel_spec, "--root", str(root), "--json"]) == 0
    assert stored_blocks(root) == [16]
    [conflict] = json.loads(capsys.readouterr().out)[kernel_spec]["conflicts"]
    assert conflict["why"] == "its signature names the kernel's module"


def factory_module(tmp_path: Path) -> str:
    """The test kernel made in a function (qualified name make.<locals>.scale)."""
    head, decorated = MODULE.split("@tdl.autotune(", 1)
    body = textwrap.indent("@tdl.autotune(" + decorated, "    ")
    module = tmp_path / "kfactory.py"
    module.write_text(
        textwrap.dedent(head) + "\ndef make():\n" + body + "\n    return scale\n\n\nscale = make()\n"
    )
    return f"{module}:scale"


def test_a_kernel_made_in_a_function_is_imported(tmp_path, capsys):
    """triton-dejavu names it by its qualified name, in the signature and the kernel's folder."""
    spec = factory_module(tmp_path)
    doc = dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [0.5]})
    doc["signature"] = "JITFunction(kfactory:make.<locals>.scale)"
    relative = (
        f"dejavu_0.7/triton_3.2.0/cuda_12.4/gpu_{H100}/make.<locals>.scale/{HASHES_0_7}/default/cache.json"
    )
    source = write_dejavu(tmp_path / "src" / relative, doc)
    assert (
        cli.main(["import-dejavu", str(source), "--kernel", spec, "--root", str(tmp_path / "r"), "--json"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)[spec]
    assert report["imported"] == 1 and report["skipped"] == []


def test_name_imports_the_files_of_a_renamed_kernel(tmp_path, kernel_spec, capsys):
    doc = dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [0.5]})
    doc["signature"] = "JITFunction(mykernels:old_scale)"
    source = write_dejavu(tmp_path / "src" / "cache.json", doc)
    argv = ["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(tmp_path / "r"), "--json"]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)[kernel_spec]["imported"] == 0  # another kernel's file
    assert cli.main([*argv, "--name", "old_scale"]) == 0
    assert json.loads(capsys.readouterr().out)[kernel_spec]["imported"] == 1
    assert cli.main([*argv, "--name", "old_scale", "--kernel", kernel_spec]) == 2
    assert "--name names the triton-dejavu kernel of one --kernel" in capsys.readouterr().err


def test_the_qualified_name_in_a_signature_names_the_kernel(tmp_path, capsys):
    """A signature with a qualified name was not read: the file, wherever it lay, was taken for any
    kernel (its keys imported into another kernel's store when their configs happened to fit)."""
    spec = factory_module(tmp_path)
    doc = dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [0.5]})
    doc["signature"] = "JITFunction(kfactory:make.<locals>.other)"
    source = write_dejavu(tmp_path / "src" / "cache.json", doc)
    assert (
        cli.main(["import-dejavu", str(source), "--kernel", spec, "--root", str(tmp_path / "r"), "--json"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)[spec]
    assert report["imported"] == 0 and report["other_kernels"] == [{"file": str(source), "kernel": "other"}]


def test_a_file_named_twice_counts_once_and_other_kernels_files_are_not_skipped_keys(
    tmp_path, kernel_spec, capsys
):
    mine = write_dejavu(
        tmp_path / "src" / "a" / "cache.json",
        dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [0.5]}),
    )
    doc = dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [0.5]})
    doc["signature"] = "JITFunction(mykernels:matmul)"
    other = write_dejavu(tmp_path / "src" / "b" / "cache.json", doc)
    argv = [
        "import-dejavu",
        str(tmp_path / "src"),
        str(mine),
        "--kernel",
        kernel_spec,
        "--root",
        str(tmp_path / "r"),
    ]
    assert cli.main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)[kernel_spec]
    assert report["files"] == [str(mine)] and report["imported"] == 1 and report["conflicts"] == []
    assert report["skipped"] == [] and report["other_kernels"] == [{"file": str(other), "kernel": "matmul"}]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "from 1 triton-dejavu file(s)" in out and ", 0 skipped; 1 file(s) of other kernels left out" in out


def test_a_cache_json_that_is_a_symlink_loop_is_a_problem_not_a_crash(tmp_path, kernel_spec, capsys):
    """A botched link in a triton-dejavu tree: that file is reported unreadable (exit 1), the others
    are imported (walking the tree had raised RuntimeError from Path.resolve)."""
    write_dejavu(
        tmp_path / "src" / "a" / "cache.json",
        dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [0.5]}),
    )
    loop = tmp_path / "src" / "b" / "cache.json"
    loop.parent.mkdir(parents=True)
    loop.symlink_to("cache.json")
    argv = ["import-dejavu", str(tmp_path / "src"), "--kernel", kernel_spec, "--root", str(tmp_path / "r")]
    assert cli.main([*argv, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)[kernel_spec]
    assert report["imported"] == 1
    assert [p["path"] for p in report["problems"]] == [str(loop)]


def test_dtypes_are_left_out_for_a_kernel_that_ignores_them(tmp_path, capsys):
    """A file tuned without ignore_dtypes, for a kernel that now has it: triton-dejavu itself leaves
    the 'torch.*' elements out on reading; the keys were skipped as not fitting."""
    module = tmp_path / "nodtypes.py"
    module.write_text(
        textwrap.dedent(MODULE).replace("do_bench=bench,", "do_bench=bench, ignore_dtypes=True,")
    )
    spec = f"{module}:scale"
    source = write_dejavu(
        tmp_path / "src" / "cache.json", dejavu_doc({key_text(5): config_text(16, 2)}, {key_text(5): [0.5]})
    )
    root = tmp_path / "root"
    assert cli.main(["import-dejavu", str(source), "--kernel", spec, "--root", str(root)]) == 0
    tuner = dejavu_import.load_tuner(spec)
    tuner.settings = dataclasses.replace(tuner.settings, custom_data_storage=root)
    assert [e["key"] for e in stored_entries(tuner.cache_path()).values()] == [[5]]


def test_a_file_without_timings_says_why_its_keys_are_skipped(tmp_path, kernel_spec, capsys):
    doc = dejavu_doc({key_text(5): config_text(16, 2)}, {})
    del doc["timings"]
    source = write_dejavu(tmp_path / "src" / "cache.json", doc)
    argv = ["import-dejavu", str(source), "--kernel", kernel_spec, "--root", str(tmp_path / "r"), "--json"]
    assert cli.main(argv) == 0
    [skipped] = json.loads(capsys.readouterr().out)[kernel_spec]["skipped"]
    assert skipped["reason"].startswith("the file has no 'timings'")
