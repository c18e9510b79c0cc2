"""The command line: list, show, merge, prune, export, and how it fails."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path

import pytest
from storage_helpers import (
    IDENTITY,
    InstantBench,
    aside_files,
    cache_file,
    deny_opens,
    entries_for,
    launch,
    make_entry,
    make_tuner,
    stored_entries,
    write_document,
)

from triton_dejavu_like import DejavuStorageWarning, _env
from triton_dejavu_like import store as storage
from triton_dejavu_like.codec import key_id
from triton_dejavu_like.store import files as store_files
from triton_dejavu_like.store import inventory, layout
from triton_dejavu_like.store.identity import stable_hash
from triton_dejavu_like.tools import cli

OTHER_GPU = {**IDENTITY, "gpu": "NVIDIA_A100-SXM4-80GB"}
SOFTMAX = {**IDENTITY, "kernel": "softmax", "tag": "prod"}


def run(*argv: str) -> int:
    return cli.main(list(argv))


def run_json(capsys, *argv: str) -> dict:
    assert run(*argv, "--json") == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def root(tmp_path) -> Path:
    """A storage tree with two kernels on one platform and one kernel on another GPU."""
    root = tmp_path / "root"
    cache_file(root).record(entries_for([(1024,), (2048,)], tuned_at="2025-03-01T10:00:00+00:00"))
    cache_file(root, SOFTMAX).record(entries_for([(4096,)], block=128))
    cache_file(root, OTHER_GPU).record(entries_for([(1024,)], block=32))
    return root


# --- list and show ------------------------------------------------------------------------------------


def test_list_prints_one_row_per_stored_kernel(capsys, root):
    assert run("list", "--root", str(root)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "KERNEL", "TAG", "TRITON", "TOOLCHAIN", "GPU", "KEYS", "LAST", "TUNED"]
    rows = [line.split() for line in lines[2:]]
    assert sorted((r[1], r[2], r[5], r[6]) for r in rows) == [
        ("matmul", "default", "NVIDIA_A100-SXM4-80GB", "1"),
        ("matmul", "default", "NVIDIA_H100_80GB_HBM3", "2"),
        ("softmax", "prod", "NVIDIA_H100_80GB_HBM3", "1"),
    ]
    assert "2025-03-01 10:00 UTC" in "\n".join(lines)


def test_list_json_and_filters(capsys, root):
    out = run_json(
        capsys, "list", "--root", str(root), "--kernel", "matmul", "--gpu", "NVIDIA_H100_80GB_HBM3"
    )
    [only] = out["files"]
    assert only["identity"] == IDENTITY and only["keys"] == 2
    assert Path(only["path"]) == cache_file(root).path
    assert only["last_tuned"] == "2025-03-01T10:00:00+00:00"


def test_list_with_a_selection_that_matches_nothing_says_so(capsys, root, tmp_path):
    """It said "no stored results under ROOT" and exited 0, as for an empty root."""
    assert run("list", "--root", str(root), "--gpu", "H100") == 1
    captured = capsys.readouterr()
    assert "nothing stored matches the selection: --gpu 'H100' matches no file" in captured.err
    assert "(stored: NVIDIA_A100-SXM4-80GB, NVIDIA_H100_80GB_HBM3)" in captured.err and not captured.out
    assert run("list", "--root", str(root), "--gpu", "NVIDIA_A100-SXM4-80GB", "--kernel", "softmax") == 1
    assert "no file of 3 has all its values together" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run("list", "--root", str(empty), "--gpu", "H100") == 0
    assert "no stored results" in capsys.readouterr().out


def test_list_uses_the_package_default_root(capsys, root, monkeypatch):
    monkeypatch.setenv(_env.STORAGE, str(root))
    assert len(run_json(capsys, "list")["files"]) == 3


def test_list_reports_unreadable_files_without_touching_them(capsys, root):
    bad = root / "dejavu_0.1" / "junk" / "cache.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"{not json")
    assert run("list", "--root", str(root)) == 0
    captured = capsys.readouterr()
    assert str(bad) in captured.err and "not JSON" in captured.err
    assert bad.read_bytes() == b"{not json"  # list never moves anything


def test_an_unreadable_files_reason_reads_as_a_sentence(capsys, root):
    """json's "Invalid control character at" became "... at at line 1"."""
    bad = root / "dejavu_0.1" / "junk" / "cache.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b'{"broken\n')
    assert run("list", "--root", str(root)) == 0
    err = capsys.readouterr().err
    assert "not JSON (Invalid control character at line 1, column 9)" in err and "at at" not in err


def test_list_reports_each_unreadable_file_once(capsys, root):
    bad = root / "dejavu_0.1" / "junk" / "cache.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"{not json")
    assert run("list", "--root", str(root)) == 0
    assert capsys.readouterr().err.count(str(bad)) == 1


def test_list_counts_invalid_entries_without_moving_them(capsys, root):
    doc = json.loads(cache_file(root).path.read_text())
    [kid, *_] = doc["entries"]
    doc["entries"][kid.replace("1024", "4096")] = {**doc["entries"][kid], "timings_ms": ["fast"]}
    cache_file(root).path.write_text(json.dumps(doc))
    before = cache_file(root).path.read_bytes()
    assert run("list", "--root", str(root)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[6:9] == ["KEYS", "INVALID", "LAST"]
    counts = {(r[1], r[5]): (r[6], r[7]) for r in (line.split() for line in lines[2:5])}
    assert counts[("matmul", "NVIDIA_H100_80GB_HBM3")] == ("2", "1")
    assert counts[("softmax", "NVIDIA_H100_80GB_HBM3")] == ("1", "0")
    assert "1 invalid entries (INVALID) are never restored" in lines[-1]
    assert cache_file(root).path.read_bytes() == before  # list never moves anything


def test_a_command_leaves_the_package_logger_as_it_found_it(capsys, root):
    """main() may run inside a user's process (a notebook, a script): the level it sets for its own
    output is put back, so the package's records still reach the root logger's level afterwards."""
    logger = logging.getLogger("triton_dejavu_like")
    before = (logger.level, list(logger.handlers))
    assert run("list", "--root", str(root)) == 0
    assert (logger.level, logger.handlers) == before


def test_show_gives_each_key_its_config_time_and_how_it_was_found(capsys, root):
    assert run("show", "matmul", "--root", str(root), "--gpu", "NVIDIA_H100_80GB_HBM3") == 0
    out = capsys.readouterr().out
    assert "key (1024,)" in out and "key (2048,)" in out
    assert "config     BLOCK=64, num_warps=4, num_stages=" in out
    assert "time       1 ms (p20 0.9, p80 1.1)" in out
    assert "found by   exhaustive: 3 of 3 configs evaluated" in out
    assert "ruled out  1:" in out and "OutOfResources" in out
    assert " top " not in out  # the best candidates only with --top: one line per stored candidate
    assert run("show", "matmul", "--root", str(root), "--gpu", "NVIDIA_H100_80GB_HBM3", "--top") == 0
    top = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("top ")]
    assert len(top) == 2  # a key each
    assert all(line.startswith("top        1 ms (p20 0.9, p80 1.1): BLOCK=64, num_warps=4") for line in top)


def test_show_lists_keys_in_the_order_of_their_values(capsys, tmp_path):
    """Sorted as text, (112, ...) came before (16, ...)."""
    root = tmp_path / "root"
    cache_file(root).record(
        entries_for([(1008, "f16"), (112, "f16"), (16, "f16"), (16, "bf16"), ("x", "f16")])
    )
    assert run("show", "matmul", "--root", str(root)) == 0
    keys = [line.strip() for line in capsys.readouterr().out.splitlines() if line.startswith("  key ")]
    assert keys == [
        "key (16, 'bf16')",
        "key (16, 'f16')",
        "key (112, 'f16')",
        "key (1008, 'f16')",
        "key ('x', 'f16')",
    ]


def test_show_says_what_ended_the_search_where_the_entry_records_it(capsys, tmp_path):
    """A pick found under a time limit or a share is told apart from one of a full search."""
    root = tmp_path / "root"
    entries = entries_for([(16, "f16"), (32, "f16"), (64, "f16")], strategy="bayesian")
    for key_values, ended_by in zip(entries.values(), ["time limit", "every candidate", None]):
        if ended_by is not None:
            key_values["ended_by"] = ended_by
    cache_file(root).record(entries)
    assert run("show", "matmul", "--root", str(root)) == 0
    found = [line.strip() for line in capsys.readouterr().out.splitlines() if "found by" in line]
    assert [line.split(" s", 1)[1].split(",")[0] for line in found] == [" (ended by: time limit)", "", ""]
    shown = run_json(capsys, "show", "matmul", "--root", str(root))["files"][0]["entries"]
    assert [entry["ended_by"] for entry in shown] == ["time limit", "every candidate", None]


def test_show_by_id_or_path_and_as_json(capsys, root):
    [softmax] = [
        f
        for f in run_json(capsys, "list", "--root", str(root))["files"]
        if f["identity"]["kernel"] == "softmax"
    ]
    by_id = run_json(capsys, "show", softmax["id"][:6], "--root", str(root))
    by_path = run_json(capsys, "show", softmax["path"])
    assert by_id == by_path
    [entry] = by_id["files"][0]["entries"]
    assert entry["key"] == [4096] and entry["config"]["kwargs"] == {"BLOCK": 128}
    assert entry["strategy"] == "exhaustive" and entry["evaluated"] == 3 and entry["space_size"] == 3
    assert entry["ruled_out"][0]["reason"] == "OutOfResources"


def test_show_with_an_empty_selector_is_an_error_not_everything(capsys, root, monkeypatch):
    monkeypatch.chdir(root)  # where "" would otherwise read every stored file
    with pytest.raises(SystemExit) as exc:
        run("show", "", "--root", str(root))
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert "empty" in captured.err and captured.out == ""


def test_show_fails_clearly_when_nothing_matches(capsys, root):
    assert run("show", "no_such_kernel", "--root", str(root)) == 1
    assert "nothing stored matches 'no_such_kernel'" in capsys.readouterr().err


def identity_with_id_prefix(prefix: str) -> dict[str, str]:
    """Another kernel's identity whose ID starts with ``prefix`` (found by trying tags)."""
    for i in range(100_000):
        ident = {**IDENTITY, "kernel": "mul", "tag": f"team{i}"}
        if stable_hash(ident).startswith(prefix):
            return ident
    raise AssertionError(f"no tag gives an ID starting with {prefix!r}")


def test_show_prefers_a_kernel_name_to_an_id_prefix(capsys, tmp_path):
    """``show add`` also showed an unrelated kernel whose ID happens to start with "add" (hex)."""
    root = tmp_path / "root"
    cache_file(root, {**IDENTITY, "kernel": "add"}).record(entries_for([(1,)]))
    mul = identity_with_id_prefix("add")
    cache_file(root, mul).record(entries_for([(2,)]))
    shown = run_json(capsys, "show", "add", "--root", str(root))["files"]
    assert [f["identity"]["kernel"] for f in shown] == ["add"]
    by_id = run_json(capsys, "show", stable_hash(mul)[:6], "--root", str(root))["files"]
    assert [f["identity"] for f in by_id] == [mul]
    assert run("show", stable_hash(mul)[:5], "--root", str(root)) == 1  # too short to be an ID
    assert "an ID prefix has 6 characters or more" in capsys.readouterr().err


def test_show_reads_a_path_only_when_it_is_written_as_one(capsys, root, tmp_path, monkeypatch):
    """A folder of the working directory named like the kernel shadowed the store."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "softmax").mkdir()
    [shown] = run_json(capsys, "show", "softmax", "--root", str(root))["files"]
    assert shown["identity"] == SOFTMAX
    assert run("show", "./softmax", "--root", str(root)) == 1  # a path: the empty folder's files
    capsys.readouterr()
    assert run("show", "gone/cache.json", "--root", str(root)) == 2
    assert "no such file or directory: gone/cache.json" in capsys.readouterr().err


# --- merge --------------------------------------------------------------------------------------------


def rank_roots(tmp_path) -> tuple[Path, Path]:
    """Two machines tuned the same kernel: key 1 only on rank 0, key 3 only on rank 1, key 2 on both
    with different configs (rank 1 newer but slower)."""
    rank0, rank1 = tmp_path / "rank0", tmp_path / "rank1"
    old, new = "2025-01-01T00:00:00+00:00", "2025-02-01T00:00:00+00:00"
    cache_file(rank0).record(
        {**entries_for([(1,)]), key_id((2,)): make_entry((2,), block=16, ms=1.0, tuned_at=old)}
    )
    cache_file(rank1).record(
        {**entries_for([(3,)]), key_id((2,)): make_entry((2,), block=32, ms=2.0, tuned_at=new)}
    )
    return rank0, rank1


@pytest.mark.parametrize(("prefer", "block"), [("newest", 32), ("fastest", 16)])
def test_merge_unions_keys_and_reports_conflicts(capsys, tmp_path, prefer, block):
    rank0, rank1 = rank_roots(tmp_path)
    dest = tmp_path / "dest"
    out = run_json(capsys, "merge", str(rank0), str(rank1), "--root", str(dest), "--prefer", prefer)
    entries = stored_entries(cache_file(dest).path)
    assert sorted(entries) == sorted(key_id((k,)) for k in (1, 2, 3))
    assert entries[key_id((2,))]["config"]["kwargs"]["BLOCK"] == block
    [conflict] = out["conflicts"]
    assert conflict["key"] == key_id((2,)) and conflict["kept"]["config"].startswith(f"BLOCK={block},")
    assert out["added"] == 3 and out["problems"] == []


def test_merge_lists_the_first_conflicts_of_each_file_and_counts_the_rest(capsys, tmp_path):
    """A dry run of 20,000 conflicting entries printed 40,000 lines."""
    rank0, rank1 = tmp_path / "rank0", tmp_path / "rank1"
    keys = [(n,) for n in range(13)]
    cache_file(rank0).record(entries_for(keys, block=16))
    cache_file(rank1).record(entries_for(keys, block=32, tuned_at="2025-06-01T00:00:00+00:00"))
    argv = ["merge", str(rank0), str(rank1), "--root", str(tmp_path / "dest"), "--dry-run"]
    assert run(*argv) == 0
    out = capsys.readouterr().out
    assert out.count("  conflict matmul key ") == 10
    assert "  ... and 3 more conflict(s) of matmul (--json lists every one)" in out
    assert len(run_json(capsys, *argv)["conflicts"]) == 13


@pytest.mark.parametrize("prefer", ["newest", "fastest"])
def test_a_merge_that_ties_keeps_the_entry_already_there(capsys, tmp_path, prefer):
    """Two results for one key, equally new and equally fast: the one in the destination (or from
    the first source) stays, so repeating a merge never swaps a result for an equal one."""
    first, second = tmp_path / "first", tmp_path / "second"
    cache_file(first).record({key_id((2,)): make_entry((2,), block=16)})
    cache_file(second).record({key_id((2,)): make_entry((2,), block=32)})
    for sources, dest in (([second], first), ([first, second], tmp_path / "fresh")):
        out = run_json(capsys, "merge", *map(str, sources), "--root", str(dest), "--prefer", prefer)
        assert stored_entries(cache_file(dest).path)[key_id((2,))]["config"]["kwargs"]["BLOCK"] == 16
        [conflict] = out["conflicts"]
        assert conflict["kept"]["config"].startswith("BLOCK=16,")


def test_merge_keeps_identities_apart(capsys, tmp_path, root):
    dest = tmp_path / "dest"
    assert run("merge", str(root), "--root", str(dest)) == 0
    assert "0 conflict(s)" in capsys.readouterr().out
    for ident in (IDENTITY, OTHER_GPU, SOFTMAX):
        assert stored_entries(cache_file(dest, ident).path) == stored_entries(cache_file(root, ident).path)


def test_merge_refuses_unreadable_inputs_and_writes_nothing(capsys, tmp_path):
    rank0, _ = rank_roots(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe")
    dest = tmp_path / "dest"
    assert run("merge", str(rank0), str(bad), str(tmp_path / "missing"), "--root", str(dest)) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "not UTF-8" in err and str(tmp_path / "missing") in err
    assert not dest.exists()
    assert run("merge", str(rank0), str(bad), "--root", str(dest), "--skip-invalid") == 0
    assert len(stored_entries(cache_file(dest).path)) == 2


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry run", "merge"])
def test_merge_into_a_corrupt_destination_sets_it_aside_and_a_dry_run_says_so(capsys, tmp_path, dry_run):
    # the real merge moves the corrupt file aside and merges; its dry run must promise the same,
    # and touch nothing
    rank0, _ = rank_roots(tmp_path)
    dest = tmp_path / "dest"
    target = cache_file(dest).path
    target.parent.mkdir(parents=True)
    target.write_bytes(b"{ not json")
    with pytest.warns(DejavuStorageWarning, match="would set it aside" if dry_run else "moved it to"):
        out = run_json(capsys, "merge", str(rank0), "--root", str(dest), *(["--dry-run"] if dry_run else []))
    assert out["added"] == 2
    if dry_run:
        assert target.read_bytes() == b"{ not json" and sorted(p.name for p in target.parent.iterdir()) == [
            "cache.json"
        ]
    else:
        assert len(stored_entries(target)) == 2
        assert any(p.name.startswith("cache.json.corrupt-") for p in target.parent.iterdir())


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)], ids=["merge", "dry run"])
def test_merge_into_a_destination_that_cannot_be_read_says_so(capsys, tmp_path, dry_run):
    # the merge itself reported it as a file "for another identity", which its dry run did not say
    rank0, _ = rank_roots(tmp_path)
    target = cache_file(tmp_path / "dest").path
    target.mkdir(parents=True)  # someone's directory where the cache file goes
    assert run("merge", str(rank0), "--root", str(tmp_path / "dest"), *dry_run) == 1
    err = capsys.readouterr().err
    assert "cannot read or create the destination" in err and "another identity" not in err
    assert target.is_dir() and not any(target.iterdir())


def test_a_warning_is_printed_once_with_default_settings(tmp_path):
    """The command's logger handler prints the package's warnings: Python's own display of the same
    warning would print it a second time."""
    rank0, _ = rank_roots(tmp_path)
    dest = tmp_path / "dest"
    target = cache_file(dest).path
    target.parent.mkdir(parents=True)
    target.write_bytes(b"{ not json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONWARNINGS")}
    result = subprocess.run(
        [sys.executable, "-m", "triton_dejavu_like", "merge", str(rank0), "--root", str(dest), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("a merge would set it aside") == 1, result.stderr
    assert "triton-dejavu-like: WARNING: tuning cache" in result.stderr


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)], ids=["merge", "dry run"])
def test_merge_never_overwrites_a_file_of_another_identity(capsys, tmp_path, dry_run):
    rank0, _ = rank_roots(tmp_path)
    dest = tmp_path / "dest"
    squatter = write_document(
        cache_file(dest).path, {**IDENTITY, "code_version": "f" * 16}, entries_for([(9,)])
    )
    assert run("merge", str(rank0), "--root", str(dest), *dry_run) == 1  # a dry run says the same
    assert "another identity" in capsys.readouterr().err
    assert cache_file(dest).path.read_bytes() == squatter


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)], ids=["merge", "dry run"])
def test_merge_into_a_file_of_a_later_release_leaves_it_and_says_so(capsys, tmp_path, dry_run):
    rank0, _ = rank_roots(tmp_path)
    dest = tmp_path / "dest"
    path = cache_file(dest).path
    write_document(path, IDENTITY, entries_for([(9,)]))
    later = json.loads(path.read_text())
    later["schema"] = storage.SCHEMA_VERSION + 1
    path.write_text(json.dumps(later))
    before = path.read_bytes()
    assert run("merge", str(rank0), "--root", str(dest), *dry_run) == 1
    err = capsys.readouterr().err
    assert "newer release" in err and "another identity" not in err
    assert path.read_bytes() == before


def test_merge_dry_run_writes_nothing(capsys, tmp_path):
    rank0, rank1 = rank_roots(tmp_path)
    dest = tmp_path / "dest"
    out = run_json(capsys, "merge", str(rank0), str(rank1), "--root", str(dest), "--dry-run")
    assert out["added"] == 3 and len(out["conflicts"]) == 1
    assert not dest.exists()


# --- prune --------------------------------------------------------------------------------------------


def test_prune_other_triton_versions(capsys, tmp_path):
    root = tmp_path / "root"
    current = {**IDENTITY, "triton": "3.6.0"}
    cache_file(root, current).record(entries_for([(1,)]))
    cache_file(root, {**IDENTITY, "triton": "3.5.1"}).record(entries_for([(1,), (2,)]))
    out = run_json(capsys, "prune", "--root", str(root), "--keep-triton", "3.6.0")
    assert out["removed_entries"] == 2 and out["kept_entries"] == 1
    assert [Path(p) for p in out["removed_files"]] == [cache_file(root, {**IDENTITY, "triton": "3.5.1"}).path]
    assert not cache_file(root, {**IDENTITY, "triton": "3.5.1"}).path.exists()
    assert len(stored_entries(cache_file(root, current).path)) == 1


def test_prune_entries_older_than_a_date(capsys, tmp_path):
    root = tmp_path / "root"
    cache_file(root).record(
        {
            key_id((1,)): make_entry((1,), tuned_at="2024-06-01T00:00:00+00:00"),
            key_id((2,)): make_entry((2,), tuned_at="2025-06-01T00:00:00+00:00"),
        }
    )
    cache_file(root, SOFTMAX).record(entries_for([(1,)], tuned_at="2024-01-01T00:00:00"))
    assert run("prune", "--root", str(root), "--older-than", "2025-01-01", "--dry-run") == 0
    assert len(stored_entries(cache_file(root).path)) == 2  # dry run
    assert run("prune", "--root", str(root), "--older-than", "2025-01-01") == 0
    assert list(stored_entries(cache_file(root).path)) == [key_id((2,))]
    assert not cache_file(root, SOFTMAX).path.exists()  # emptied, so removed
    out = capsys.readouterr().out.splitlines()
    dry, real = out[: len(out) // 2], out[len(out) // 2 :]
    assert dry[0].startswith("would remove 2 entries and 1 cache file(s)") and dry[1:] == real[1:]
    assert real[0].startswith("removed 2 entries and 1 cache file(s)")
    assert real[1:] == [
        f"  {cache_file(root, SOFTMAX).path}",
        f"  1 entries from {cache_file(root).path}",
        "    key (1,), tuned 2024-06-01T00:00:00+00:00",  # a dry run shows which keys would go
    ]


def newer_triton_file(root: Path, *, with_old: bool = True) -> tuple[Path, str]:
    """A file tuned with a newer Triton whose configs carry a field this release does not know: an
    entry this release cannot read (its key id is returned), and an old one (2020)."""
    identity = {**IDENTITY, "triton": "3.99.0"}
    unknown = make_entry((2,), tuned_at="2026-01-01T00:00:00+00:00")
    unknown["config"]["future_field"] = 1
    entries = {key_id((2,)): unknown}
    if with_old:
        entries[key_id((1,))] = make_entry((1,), tuned_at="2020-01-01T00:00:00+00:00")
    path = cache_file(root, identity).path
    write_document(path, identity, entries)
    return path, key_id((2,))


def test_prune_and_merge_keep_entries_this_release_cannot_read_as_they_are(capsys, tmp_path):
    """A shared root also holds a newer Triton's file: pruning old entries (or merging into it) keeps
    the entries whose configs this release cannot read in the file, unchanged, and says so; they had
    been moved out of that valid file into cache.json.rejected-*."""
    root = tmp_path / "root"
    path, unknown = newer_triton_file(root)
    raw = json.loads(path.read_text())["entries"][unknown]
    out = run_json(capsys, "prune", "--root", str(root), "--older-than", "2021-01-01")
    assert out["removed_entries"] == 1 and out["removed_files"] == []
    assert out["unreadable_kept"] == {str(path): 1}
    assert json.loads(path.read_text())["entries"] == {unknown: raw}
    assert aside_files(path, layout.REJECTED_SUFFIX) == []
    identity = json.loads(path.read_text())["identity"]
    source = tmp_path / "other"
    cache_file(source, identity).record(entries_for([(3,)]))
    assert run("merge", str(source), "--root", str(root)) == 0
    assert json.loads(path.read_text())["entries"][unknown] == raw
    assert sorted(json.loads(path.read_text())["entries"]) == sorted([unknown, key_id((3,))])
    assert aside_files(path, layout.REJECTED_SUFFIX) == []
    assert run("prune", "--root", str(root), "--keep-triton", IDENTITY["triton"], "--force") == 0
    assert not path.exists()  # removing the whole file, as asked, removes what it cannot read too


@pytest.mark.parametrize("criterion", [["--older-than", "2030-01-01"], ["--keep-triton", "0.0", "--force"]])
def test_prune_reports_a_file_removed_only_when_it_is(capsys, tmp_path, criterion):
    """A file whose only entry this release cannot read: kept as it is by --older-than (and not
    reported removed), removed by --keep-triton (its entry set aside, as any invalid entry); each had
    been reported removed and left in place."""
    root = tmp_path / "root"
    path, _ = newer_triton_file(root, with_old=False)
    whole = criterion[0] == "--keep-triton"
    out = run_json(capsys, "prune", "--root", str(root), *criterion)
    assert [Path(p) for p in out["removed_files"]] == ([path] if whole else [])
    assert path.exists() is not whole


def test_prune_keeps_the_newest_entries_of_each_file(capsys, tmp_path):
    """A file nearing the size limit of a readable file (a kernel keyed by token count): keep the
    entries tuned last, whatever their keys."""
    root = tmp_path / "root"
    cache_file(root).record(
        {key_id((n,)): make_entry((n,), tuned_at=f"2025-0{n}-01T00:00:00+00:00") for n in range(1, 6)}
    )
    cache_file(root, SOFTMAX).record(entries_for([(1,)], tuned_at="2025-06-01T00:00:00+00:00"))
    out = run_json(capsys, "prune", "--root", str(root), "--keep-newest", "2", "--older-than", "2025-05-01")
    assert out["removed_entries"] == 4 and out["kept_entries"] == 2  # both rules apply
    assert list(stored_entries(cache_file(root).path)) == [key_id((5,))]
    cache_file(root).record(
        {key_id((n,)): make_entry((n,), tuned_at=f"2025-0{n}-01T00:00:00+00:00") for n in range(6, 9)}
    )
    out = run_json(capsys, "prune", "--root", str(root), "--keep-newest", "2")
    assert out["removed_entries"] == 2 and out["kept_entries"] == 3  # softmax's one entry stays
    assert sorted(stored_entries(cache_file(root).path)) == sorted([key_id((7,)), key_id((8,))])
    with pytest.raises(SystemExit) as refused:
        run("prune", "--root", str(root), "--keep-newest", "0")
    assert refused.value.code == 2 and "--keep-newest" in capsys.readouterr().err


def test_prune_dry_run_names_the_keys_it_would_remove(capsys, tmp_path):
    """Before removing entries by age or count, a dry run says which keys go (oldest first); a text
    report lists the first ones of each file, --json every one."""
    root = tmp_path / "root"
    tuned = {n: f"2025-01-{n:02d}T00:00:00+00:00" for n in range(1, 16)}
    cache_file(root).record({key_id((n,)): make_entry((n,), tuned_at=t) for n, t in reversed(tuned.items())})
    assert run("prune", "--root", str(root), "--keep-newest", "2", "--dry-run") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"  13 entries from {cache_file(root).path}"
    assert lines[2:12] == [f"    key ({n},), tuned {tuned[n]}" for n in range(1, 11)]
    assert lines[12:] == ["    ... and 3 more (--json lists every key)"]
    out = run_json(capsys, "prune", "--root", str(root), "--keep-newest", "2", "--dry-run")
    listed = out["removed_keys"][str(cache_file(root).path)]
    assert [k["key"] for k in listed] == [[n] for n in range(1, 14)]
    assert len(stored_entries(cache_file(root).path)) == 15  # nothing removed by either dry run


def test_prune_keeps_the_entries_tuned_last_within_one_second(capsys, tmp_path):
    """Keys tuned in quick succession (a warm-up under the interpreter, or on a fast GPU): the times
    were stored to the second, so --keep-newest kept the keys with the largest ids instead."""
    import time

    import triton

    from triton_dejavu_like.store.entry import StoredEntry

    root = tmp_path / "root"
    for n in (500, 400, 300, 200, 100):
        entry = StoredEntry.new(
            (n,),
            triton.Config({"BLOCK": 16}),
            [1.0],
            evaluated=1,
            space_size=1,
            strategy="exhaustive",
            tuning_time_s=0.01,
        )
        assert cache_file(root).record({entry.key_id: entry})
        time.sleep(0.005)
    run_json(capsys, "prune", "--root", str(root), "--keep-newest", "2")
    assert sorted(stored_entries(cache_file(root).path)) == sorted([key_id((100,)), key_id((200,))])


def test_merge_over_the_size_limit_says_why_and_keeps_the_destination(capsys, tmp_path, monkeypatch):
    src, dest = tmp_path / "src", tmp_path / "dest"
    cache_file(src).record(entries_for([(n,) for n in range(10)]))
    cache_file(dest).record(entries_for([(n,) for n in range(10, 20)]))
    before = cache_file(dest).path.read_bytes()
    monkeypatch.setattr(store_files, "MAX_FILE_BYTES", len(before) + 100)
    with pytest.warns(DejavuStorageWarning, match="prune --keep-newest"):
        assert run("merge", str(src), "--root", str(dest)) == 1
    err = capsys.readouterr().err
    assert "over the" in err and "limit" in err and "cannot be written" not in err
    assert cache_file(dest).path.read_bytes() == before


def test_prune_that_cannot_rewrite_a_file_counts_nothing_as_removed(capsys, tmp_path, monkeypatch):
    root = tmp_path / "root"
    cache_file(root).record(entries_for([(1,), (2,)], tuned_at="2024-06-01T00:00:00+00:00"))
    monkeypatch.setattr(storage.CacheFile, "update", lambda self, change: False)
    assert run("prune", "--root", str(root), "--older-than", "2025-01-01", "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["removed_entries"] == 0 and report["kept_entries"] == 2
    assert report["removed_files"] == [] and report["problems"]


@pytest.mark.parametrize(
    "command", [["merge", "{src}"], ["prune", "--older-than", "2030-01-01"], ["prune", "--keep-newest", "1"]]
)
def test_a_root_that_cannot_be_written_is_said_by_the_command_not_as_a_tuning_process(
    capsys, tmp_path, monkeypatch, command
):
    """merge and prune on a read-only root gave the tuner's warning: "results stay in memory for
    this process and later processes tune these keys again", then only "could not be rewritten"."""
    root, src = tmp_path / "root", tmp_path / "src"
    cache_file(root).record(entries_for([(1,), (2,)], tuned_at="2024-06-01T00:00:00+00:00"))
    cache_file(src).record(entries_for([(3,)]))
    before = stored_bytes(root)
    deny_opens(monkeypatch, root, errno.EROFS, writes_only=True)
    argv = [a.replace("{src}", str(src)) for a in command]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuStorageWarning)
        assert run(*argv, "--root", str(root)) == 1
    err = capsys.readouterr().err
    assert "results stay in memory" not in err
    assert f"{cache_file(root).path}: " in err and "Read-only file system" in err, err
    assert stored_bytes(root) == before


def stored_bytes(root: Path) -> dict[Path, bytes]:
    """Every cache file under ``root`` (valid or not), byte for byte."""
    return {p: p.read_bytes() for p in root.rglob(layout.CACHE_FILE_NAME)}


def set_aside_both_ways(cf) -> None:
    """A corrupt file and an invalid entry of ``cf`` moved aside by loads; ``cf`` keeps a valid entry."""
    cf.path.parent.mkdir(parents=True, exist_ok=True)
    cf.path.write_bytes(b"garbage")
    cf.load()  # the whole file moved aside as corrupt
    bad = {**make_entry((2,)), "timings_ms": "fast"}
    write_document(cf.path, cf.identity, {**entries_for([(1,)]), key_id((2,)): bad})
    cf.load()  # the invalid entry moved aside, the valid one kept in place
    assert list(stored_entries(cf.path)) == [key_id((1,))]


def quarantined(cf) -> list[Path]:
    return aside_files(cf.path, layout.CORRUPT_SUFFIX) + aside_files(cf.path, layout.REJECTED_SUFFIX)


def test_prune_quarantined_removes_only_what_was_set_aside(capsys, root):
    """--quarantined deletes the files moved aside (corrupt files and rejected entries), under --kernel
    that kernel's only; stored results stay, and so does a bad cache file nothing has moved aside."""
    matmul, softmax = cache_file(root), cache_file(root, SOFTMAX)
    for cf in (matmul, softmax):
        set_aside_both_ways(cf)
        assert len(quarantined(cf)) == 2
    unread = cache_file(root, {**IDENTITY, "gpu": "NVIDIA_L4"}).path
    unread.parent.mkdir(parents=True)
    unread.write_bytes(b"{not json")  # reported by prune, never removed
    before = stored_bytes(root)

    assert run("prune", "--root", str(root), "--quarantined", "--kernel", "softmax") == 1  # reports unread
    assert quarantined(softmax) == [] and len(quarantined(matmul)) == 2
    assert stored_bytes(root) == before
    assert run("prune", "--root", str(root), "--quarantined") == 1
    assert quarantined(matmul) == []
    assert stored_bytes(root) == before


def test_prune_with_kernel_touches_only_that_kernels_files(capsys, root):
    softmax = cache_file(root, SOFTMAX).path
    others = {p: data for p, data in stored_bytes(root).items() if p != softmax}
    assert run("prune", "--root", str(root), "--older-than", "2999-01-01", "--kernel", "softmax") == 0
    assert stored_bytes(root) == others  # softmax's file emptied and removed, the others untouched


def test_prune_with_a_kernel_that_nothing_stores_exits_1(capsys, root):
    """A mistyped --kernel pruned nothing and exited 0, as if the prune had happened."""
    before = stored_bytes(root)
    assert run("prune", "--root", str(root), "--older-than", "2999-01-01", "--kernel", "sofmax") == 1
    err = capsys.readouterr().err
    assert "nothing stored for kernel 'sofmax'" in err and "softmax" in err  # the stored kernels listed
    assert stored_bytes(root) == before


def test_prune_needs_a_criterion(capsys, root):
    assert run("prune", "--root", str(root)) == 2
    assert "say what to prune" in capsys.readouterr().err
    assert len(list(root.rglob("cache.json"))) == 3


@pytest.mark.parametrize(
    "option, value",
    [
        ("--keep-gpu", "NONEXISTENT"),
        ("--keep-gpu", "H100"),  # the stored name is longer
        ("--keep-triton", "3.9"),  # a version stored as 3.9.0 would not match either
        ("--keep-toolchain", "rocm_6.2.1"),  # a store tuned with another toolchain
    ],
)
def test_prune_refuses_a_keep_value_that_matches_nothing(capsys, root, option, value):
    before = {p: p.read_bytes() for p in root.rglob("cache.json")}
    assert run("prune", "--root", str(root), option, value) == 2
    err = capsys.readouterr().err
    assert "matches no stored result" in err and "--force" in err
    field = option.removeprefix("--keep-")
    stored = {IDENTITY[field], OTHER_GPU[field]}
    assert all(v in err for v in stored)  # the values that exist are listed
    assert {p: p.read_bytes() for p in root.rglob("cache.json")} == before


def test_prune_refuses_keep_values_each_stored_but_never_together(capsys, root):
    """Each value was in some file, so the guard let through values that no file has together: every
    file was removed."""
    cache_file(root, {**OTHER_GPU, "triton": "3.4.0"}).record(entries_for([(1,)]))
    before = stored_bytes(root)
    assert run("prune", "--root", str(root), "--keep-triton", "3.4.0", "--keep-gpu", IDENTITY["gpu"]) == 2
    err = capsys.readouterr().err
    assert "no stored result has these values together" in err and "--force" in err
    assert "triton 3.4.0, gpu NVIDIA_A100-SXM4-80GB; triton 3.9.0, gpu NVIDIA_A100-SXM4-80GB" in err
    assert stored_bytes(root) == before


def test_prune_keep_values_are_checked_against_the_kernel_pruned(capsys, root):
    """--kernel softmax --keep-gpu A100: softmax is stored for the H100 only, so all of it would go."""
    before = stored_bytes(root)
    assert run("prune", "--root", str(root), "--kernel", "softmax", "--keep-gpu", OTHER_GPU["gpu"]) == 2
    assert f"stored values: {IDENTITY['gpu']} (" in capsys.readouterr().err
    assert stored_bytes(root) == before
    assert run("prune", "--root", str(root), "--kernel", "matmul", "--keep-gpu", OTHER_GPU["gpu"]) == 0
    assert not cache_file(root).path.exists() and cache_file(root, SOFTMAX).path.exists()


def test_prune_with_force_removes_what_a_non_matching_keep_value_says(capsys, root):
    assert run("prune", "--root", str(root), "--keep-gpu", "NONEXISTENT", "--force") == 0
    assert list(root.rglob("cache.json")) == []


def test_prune_keeps_the_matching_gpu(capsys, root):
    assert run("prune", "--root", str(root), "--keep-gpu", IDENTITY["gpu"]) == 0
    assert not cache_file(root, OTHER_GPU).path.exists()
    assert cache_file(root).path.exists() and cache_file(root, SOFTMAX).path.exists()


# --- export ---------------------------------------------------------------------------------------------


def test_export_refuses_a_selection_spanning_platforms(capsys, root, tmp_path):
    assert run("export", str(tmp_path / "out"), "--root", str(root)) == 2
    err = capsys.readouterr().err
    assert "spans 2 platforms" in err and "NVIDIA_A100-SXM4-80GB" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("name", ["ship.tar", "ship.zip", "ship.tar.xz"])
def test_export_refuses_an_archive_it_does_not_write(capsys, root, tmp_path, name):
    out = tmp_path / name
    assert run("export", str(out), "--root", str(root), "--gpu", IDENTITY["gpu"]) == 2
    assert "gzipped tar archive" in capsys.readouterr().err
    assert not out.exists()  # not a folder of that name


def test_export_archive_names_in_any_case(capsys, root, tmp_path):
    out = tmp_path / "SHIP.TAR.GZ"
    assert run("export", str(out), "--root", str(root), "--gpu", IDENTITY["gpu"]) == 0
    assert out.is_file() and tarfile.is_tarfile(out)


def test_export_to_a_folder(capsys, root, tmp_path):
    out = tmp_path / "deploy"
    assert run("export", str(out), "--root", str(root), "--gpu", "NVIDIA_H100_80GB_HBM3") == 0
    for ident in (IDENTITY, SOFTMAX):
        assert stored_entries(cache_file(out, ident).path) == stored_entries(cache_file(root, ident).path)
    assert not cache_file(out, OTHER_GPU).path.exists()


def test_an_export_into_a_folder_ships_the_exported_results_over_what_it_held(capsys, root, tmp_path):
    """The folder kept the entries it held when they were newer (merged preferring the newest): the
    command said it exported the root's results, and the deployment shipped other configs."""
    out = tmp_path / "deploy"
    held = entries_for([(1024,), (8,)], block=128, tuned_at="2030-01-01T00:00:00+00:00")
    cache_file(out).record(held)
    before = stored_bytes(out)
    select = ("--root", str(root), "--kernel", "matmul", "--gpu", IDENTITY["gpu"])
    assert run("export", str(out), *select, "--dry-run") == 0
    assert f"would replace 1 stored entries in {cache_file(out).path}" in capsys.readouterr().out
    assert stored_bytes(out) == before
    assert run("export", str(out), *select) == 0
    assert f"replaced 1 stored entries in {cache_file(out).path}" in capsys.readouterr().out
    shipped = stored_entries(cache_file(out).path)
    assert shipped == {**stored_entries(cache_file(root).path), key_id((8,)): held[key_id((8,))]}


def test_export_counts_the_keys_it_writes(capsys, root, tmp_path):
    """Two files of one identity (a copy kept inside the root) were counted twice: 4 keys exported,
    2 in the archive."""
    copy = cache_file(root / "backup").path
    copy.parent.mkdir(parents=True)
    copy.write_bytes(cache_file(root).path.read_bytes())
    out = tmp_path / "ship.tar.gz"
    payload = run_json(
        capsys, "export", str(out), "--root", str(root), "--kernel", "matmul", "--gpu", IDENTITY["gpu"]
    )
    assert payload["keys"] == 2 and len(stored_entries_in(out)) == 2


def stored_entries_in(archive: Path) -> list:
    files, problems = inventory.read_sources([archive])
    assert not problems
    return [e for f in files for e in f.entries.values()]


@pytest.mark.parametrize("inside", [".", "deploy", "dejavu_0.1/deploy"])
def test_export_refuses_a_folder_inside_the_root_it_reads(capsys, root, tmp_path, inside):
    out = root / inside
    before = stored_bytes(root)
    assert run("export", str(out), "--root", str(root), "--gpu", IDENTITY["gpu"]) == 2
    assert f"is inside {root}, the root read" in capsys.readouterr().err
    assert stored_bytes(root) == before and not (root / "deploy").exists()


def test_an_exported_archive_ships_results_a_fresh_machine_restores(capsys, tmp_path):
    tuned = tmp_path / "tuned"
    tuner = make_tuner(custom_data_storage=tuned)
    for n in (100, 200):
        launch(tuner, n)
    archive = tmp_path / "kernels.tar.gz"
    assert run("export", str(archive), "--root", str(tuned), "--kernel", "double_kernel") == 0
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        assert all(not n.startswith("/") and ".." not in Path(n).parts for n in names)
        assert names == [tuner.cache_path().relative_to(tuned).as_posix()]
    fresh = tmp_path / "fresh"
    assert run("merge", str(archive), "--root", str(fresh)) == 0
    bench = InstantBench()
    restored = make_tuner(bench=bench, custom_data_storage=fresh)
    for n in (100, 200):
        launch(restored, n)
        assert restored.last_decision == "restored"
    assert bench.calls == 0


# --- errors and the entry points ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["frobnicate"],
        ["merge"],
        ["prune", "--older-than", "last tuesday"],
        ["prune", "--older-than", "99999999999d"],
        ["prune", "--older-than", "9999-12-31T23:59:59-23:59"],
        ["show"],
        [],
        ["list", "--prefer", "x"],
    ],
)
def test_bad_arguments_exit_with_status_2(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err


def test_an_unwritable_destination_is_an_error_not_a_traceback(capsys, root, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    assert (
        run("export", str(blocker / "kernels.tar.gz"), "--root", str(root), "--gpu", "NVIDIA_A100-SXM4-80GB")
        == 1
    )
    assert "error:" in capsys.readouterr().err


def test_missing_root_is_an_error(capsys, tmp_path):
    assert run("list", "--root", str(tmp_path / "nowhere")) == 2
    assert "no storage at" in capsys.readouterr().err


def test_python_dash_m_runs_the_command_line(root):
    env = {**os.environ, "TRITON_DEJAVU_STORAGE": str(root)}
    ok = subprocess.run(
        [sys.executable, "-m", "triton_dejavu_like", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    assert len(json.loads(ok.stdout)["files"]) == 3
    bad = subprocess.run(
        [sys.executable, "-m", "triton_dejavu_like", "show", "nope"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 1 and "error: nothing stored matches" in bad.stderr


# --- layered roots (--root RW:LAYER, as serving reads them) ----------------------------------------------


@pytest.fixture
def served(tmp_path) -> tuple[Path, Path]:
    """A written root and a layer: 1024 only in the root, 2048 only in the layer, 4096 in both with
    other winners (serving takes the root's)."""
    rw, layer = tmp_path / "rw", tmp_path / "layer"
    cache_file(rw).record(entries_for([(1024,), (4096,)], block=32, tuned_at="2025-01-01T00:00:00+00:00"))
    cache_file(layer).record(entries_for([(2048,), (4096,)], block=128, tuned_at="2025-06-01T00:00:00+00:00"))
    return rw, layer


SERVED_BLOCKS = {1024: 32, 2048: 128, 4096: 32}  # what a process serving with root rw and layer restores


def blocks(entries) -> dict[int, int]:
    return {e.key[0]: e.config.kwargs["BLOCK"] for e in entries}


@pytest.mark.parametrize("given", ["joined", "repeated"])
@pytest.mark.parametrize("out", ["deploy", "ship.tar.gz"])
def test_export_reads_every_layer_of_the_root_as_serving_does(capsys, served, tmp_path, given, out):
    """Only the first part of --root RW:LAYER was exported: the keys serving restores from the layer
    were missing from the shipped results, without a word."""
    rw, layer = served
    roots = (
        ["--root", f"{rw}{os.pathsep}{layer}"]
        if given == "joined"
        else ["--root", str(rw), "--root", str(layer)]
    )
    payload = run_json(capsys, "export", str(tmp_path / out), *roots)
    assert payload["keys"] == 3 and payload["roots"] == [str(rw), str(layer)]
    assert blocks(stored_entries_in(tmp_path / out)) == SERVED_BLOCKS
    assert run("export", str(layer / "deploy"), *roots) == 2  # inside a root it reads: the layer's too
    assert "the root read" in capsys.readouterr().err


def test_heuristic_learns_from_every_layer_of_the_root_as_serving_does(capsys, served):
    rw, layer = served
    payload = run_json(
        capsys, "heuristic", "matmul", "--method", "nearest", "--root", f"{rw}{os.pathsep}{layer}"
    )
    namespace: dict = {}
    exec(compile(payload["source"], "heuristic", "exec"), namespace)  # the module the user imports
    assert payload["keys"] == 3
    assert {n: namespace["heuristic"]((n,)).kwargs["BLOCK"] for n in SERVED_BLOCKS} == SERVED_BLOCKS


@pytest.mark.parametrize("command", [["prune", "--older-than", "0d"], ["merge", "{src}"]], ids=lambda c: c[0])
def test_a_command_that_writes_acts_on_the_written_root_only_and_says_so(capsys, served, tmp_path, command):
    rw, layer = served
    source = tmp_path / "src"
    cache_file(source).record(entries_for([(8192,)]))
    before = stored_bytes(layer)
    argv = [a.replace("{src}", str(source)) for a in command]
    assert run(*argv, "--root", f"{rw}{os.pathsep}{layer}") == 0
    err = capsys.readouterr().err
    assert f"acts on the written root {rw} only" in err and str(layer) in err
    assert stored_bytes(layer) == before  # never a layer
    kept = {n for f in inventory.read_sources([rw])[0] for n in blocks(f.entries.values())}
    assert kept == ({1024, 4096, 8192} if command[0] == "merge" else set())
    assert run(*argv, "--root", f"{rw}{os.pathsep}{tmp_path / 'typo'}") == 2  # a layer that is not there
