"""The command line's selection: every identity field is an option (``--dejavu``, ``--code-version``,
...), a selection to narrow names the stored values of each field that differs, and ``list`` shows
the fields that tell files apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from storage_helpers import IDENTITY, entries_for, write_document

from triton_dejavu_like.store import layout
from triton_dejavu_like.store.identity import package_major_minor
from triton_dejavu_like.tools import cli

OLD_RELEASE = {**IDENTITY, "dejavu": "0.0"}


def store(root: Path, identity: dict[str, str], keys=((1024,), (2048,)), **options) -> Path:
    path = layout.cache_path(root, identity)
    write_document(path, identity, entries_for(keys, **options))
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.fixture
def two_releases(tmp_path) -> Path:
    """One kernel stored by this release and by an older one (dejavu 0.0), for one platform."""
    root = tmp_path / "root"
    store(root, OLD_RELEASE, block=32)
    store(root, IDENTITY, block=64)
    return root


def test_files_of_an_older_release_are_listed_apart(capsys, two_releases):
    status, out, _ = run(capsys, "list", "--root", str(two_releases))
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["ID", "KERNEL", "TAG", "DEJAVU"]
    assert sorted(line.split()[3] for line in lines[2:]) == ["0.0", "0.1"]
    status, out, _ = run(capsys, "list", "--root", str(two_releases), "--dejavu", "0.0")
    assert status == 0 and len(out.splitlines()) == 3 and "DEJAVU" not in out  # one value: no column
    status, out, _ = run(capsys, "show", "matmul", "--root", str(two_releases))
    assert status == 0 and "dejavu 0.0" in out and "dejavu 0.1" in out


@pytest.mark.parametrize("command", ["export", "heuristic"])
def test_a_selection_spanning_releases_names_the_option_that_picks_one(
    capsys, two_releases, tmp_path, command
):
    """Both refused with "pick one with --triton/--toolchain/--gpu", which could not tell them apart."""
    argv = ["export", str(tmp_path / "out")] if command == "export" else ["heuristic", "matmul"]
    argv += ["--root", str(two_releases)]
    status, _, err = run(capsys, *argv)
    assert status == 2
    assert "spans 2 platforms" in err or "span 2 identities" in err
    assert "--dejavu (stored: 0.0, 0.1)" in err and "--gpu" not in err
    status, _, err = run(
        capsys, *argv, "--dejavu", "0.1", *(["--method", "nearest"] if command == "heuristic" else [])
    )
    assert status == 0, err


def test_a_selection_to_narrow_names_every_field_that_differs(capsys, tmp_path):
    root = tmp_path / "root"
    store(root, IDENTITY)
    store(root, {**IDENTITY, "triton": "3.4.0", "gpu": "B"})
    store(root, {**IDENTITY, "triton": "3.4.0"})
    for argv in (["export", str(tmp_path / "out")], ["heuristic", "matmul"]):
        status, _, err = run(capsys, *argv, "--root", str(root))
        assert status == 2 and ("3 platforms" in err or "3 identities" in err)
        assert "--triton (stored: 3.4.0, 3.9.0); --gpu (stored: B, NVIDIA_H100_80GB_HBM3)" in err
        assert "--toolchain" not in err and "--dejavu" not in err


def test_prune_keeps_one_release(capsys, two_releases):
    status, out, _ = run(capsys, "prune", "--root", str(two_releases), "--keep-dejavu", "0.1", "--json")
    assert status == 0
    assert json.loads(out)["removed_files"] == [str(layout.cache_path(two_releases, OLD_RELEASE))]
    assert layout.cache_path(two_releases, IDENTITY).exists()
    status, _, err = run(capsys, "prune", "--root", str(two_releases), "--keep-dejavu", "9.9")
    assert status == 2 and "stored values: 0.1" in err


def test_keep_dejavu_without_a_value_keeps_this_release(capsys, tmp_path):
    root = tmp_path / "root"
    mine = store(root, {**IDENTITY, "dejavu": package_major_minor()})
    old = store(root, {**IDENTITY, "dejavu": "0.0"})
    status, _, _ = run(capsys, "prune", "--root", str(root), "--keep-dejavu")
    assert status == 0 and mine.exists() and not old.exists()


def test_list_shows_a_hash_that_tells_apart_files_that_look_the_same(capsys, tmp_path):
    root = tmp_path / "root"
    store(root, IDENTITY)
    store(root, {**IDENTITY, "code_version": "aaaaaaaaaaaaaaaa"})
    store(root, {**IDENTITY, "kernel": "softmax", "kernel_configs": "bbbbbbbbbbbbbbbb"})  # another kernel
    status, out, _ = run(capsys, "list", "--root", str(root))
    assert status == 0
    assert "CODE VERSION" in out and "aaaaaaaaaaaaaaaa" in out and "KERNEL CONFIGS" not in out
    status, out, _ = run(capsys, "list", "--root", str(root), "--code-version", "aaaaaaaaaaaaaaaa", "--json")
    [only] = json.loads(out)["files"]
    assert only["identity"]["code_version"] == "aaaaaaaaaaaaaaaa"


@pytest.mark.parametrize(
    ("field", "option"),
    [("tag", "--tag"), ("code_version", "--code-version"), ("kernel_configs", "--kernel-configs")],
)
def test_heuristic_refuses_results_of_several_tags_code_versions_or_config_lists(
    capsys, tmp_path, field, option
):
    """An experiment tag's configs, or an old code version's keys, went into the heuristic unannounced."""
    root = tmp_path / "root"
    store(root, IDENTITY, keys=[(64,), (128,)], block=64)
    store(root, {**IDENTITY, field: "experiment"}, keys=[(256,)], block=16)
    status, out, err = run(capsys, "heuristic", "matmul", "--root", str(root), "--method", "nearest")
    assert status == 2 and not out
    assert f"span 2 identities; pick one with {option} (stored: " in err and "experiment" in err
    status, out, _ = run(
        capsys, "heuristic", "matmul", "--root", str(root), "--method", "nearest", option, IDENTITY[field]
    )
    assert status == 0 and "'BLOCK': 16" not in out


def test_heuristic_with_a_kernel_option_naming_another_kernel_says_so(capsys, tmp_path):
    """It said "nothing stored for kernel 'matmul'", which is stored."""
    root = tmp_path / "root"
    store(root, IDENTITY, keys=[(64,), (128,)])
    store(root, {**IDENTITY, "kernel": "softmax"}, keys=[(64,)])
    status, out, err = run(capsys, "heuristic", "matmul", "--root", str(root), "--kernel", "softmax")
    assert status == 2 and not out
    assert "--kernel softmax names another kernel than KERNEL matmul" in err
    status, out, _ = run(capsys, "heuristic", "matmul", "--root", str(root), "--kernel", "matmul")
    assert status == 0 and "def heuristic" in out
