"""The command line never shows a traceback for a mistake, never destroys data by a typo, never lets a
stored name drive the terminal, and sees through links exactly what the tuner sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from storage_helpers import (
    IDENTITY,
    InstantBench,
    cache_file,
    entries_for,
    launch,
    make_entry,
    make_tuner,
    stored_entries,
    write_document,
)

from triton_dejavu_like import DejavuConfigWarning, _env
from triton_dejavu_like.codec import key_id
from triton_dejavu_like.store import inventory
from triton_dejavu_like.store.cache_file import CacheFile
from triton_dejavu_like.tools import cli

REPO = Path(__file__).parent.parent


def run(*argv: str) -> int:
    return cli.main(list(argv))


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "root"
    cache_file(root).record(entries_for([(1,), (2,)]))
    return root


# --- mistakes: one line, exit 2 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--bogus"],
        ["show"],
        ["prune", "--older-than", "yesterday-ish"],
        ["merge", "--prefer", "best", "x"],
        ["export"],
        ["import-dejavu", "x"],
    ],
)
def test_an_argument_error_is_one_line(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "error:" in err and "--help" in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--root", "{tmp}/nowhere"],
        ["show", "x", "--root", "{tmp}/nowhere"],
        ["prune", "--older-than", "30d", "--root", "{tmp}/nowhere"],
        ["export", "{tmp}/out", "--root", "{tmp}/nowhere"],
        ["import-dejavu", "{tmp}/missing.json", "--kernel", "m:k"],
        ["import-dejavu", "{root}", "--kernel", "no_such_module:k", "--root", "{tmp}/r"],
    ],
)
def test_a_path_or_kernel_that_is_not_there_exits_2_in_one_line(capsys, tmp_path, root, argv):
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{root}", str(root)) for a in argv]
    assert run(*argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "error:" in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--root", "{root}" + os.pathsep + "{tmp}/typo"],
        ["list", "--root", "{tmp}/typo", "--root", "{root}"],
        ["show", "matmul", "--root", "{root}", "--root", "{tmp}/typo"],
        ["prune", "--older-than", "30d", "--root", "{root}" + os.pathsep + "{tmp}/typo"],
        ["export", "{tmp}/out", "--root", "{root}" + os.pathsep + "{tmp}/typo"],
        ["heuristic", "matmul", "--root", "{root}" + os.pathsep + "{tmp}/typo"],
    ],
)
def test_a_root_part_that_is_not_there_exits_2_beside_one_that_is(capsys, tmp_path, root, argv):
    """It was left out without a word as long as another root existed."""
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{root}", str(root)) for a in argv]
    assert run(*argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"{tmp_path / 'typo'}: that --root does not exist" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["merge", "{root}", "--root", "{tmp}/file"],
        ["import-dejavu", "{root}", "--kernel", "no_such_module:k", "--root", "{tmp}/file"],
        ["tune", "no_such_spec.py", "--root", "{tmp}/file"],
    ],
)
def test_a_written_root_that_is_a_file_exits_2_in_one_line_before_any_work(capsys, tmp_path, root, argv):
    """merge and import-dejavu went on: a line per destination file, each "Not a directory" under
    the file's path, exit 1 (tune already refused it)."""
    (tmp_path / "file").write_text("in the way\n")
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{root}", str(root)) for a in argv]
    assert run(*argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"triton-dejavu-like {argv[0]}: error: --root {tmp_path / 'file'} is not a folder"
    ]
    assert (tmp_path / "file").read_text() == "in the way\n"


@pytest.mark.parametrize("inside", ["merged", "dejavu_0.1/merged"])
def test_merge_into_a_folder_inside_a_source_exits_2_and_writes_nothing(capsys, root, inside):
    """The merged tree was written inside the source: the source's next list showed every file twice,
    and its next merge or export read both."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    assert run("merge", str(root), "--root", str(root / inside)) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"is inside {root}, a source read" in err, err
    assert sorted(p for p in root.rglob("*") if p.is_file()) == files


def test_merge_of_a_root_into_itself_changes_nothing_and_is_no_error(capsys, root):
    before = stored_entries(cache_file(root).path)
    assert run("merge", str(root), "--root", str(root)) == 0
    assert "0 added, 0 replaced, 2 unchanged" in capsys.readouterr().out
    assert stored_entries(cache_file(root).path) == before


def test_a_storage_layer_that_is_not_there_is_said_once(capsys, tmp_path, root, monkeypatch):
    monkeypatch.setenv(_env.STORAGE, os.pathsep.join([str(root), str(tmp_path / "gone")]))
    assert run("list") == 0
    captured = capsys.readouterr()
    assert captured.err.count("gone") == 1 and "does not exist: left out" in captured.err
    assert "matmul" in captured.out
    monkeypatch.setenv(_env.STORAGE, os.pathsep.join([str(tmp_path / "new"), str(root)]))
    assert run("list") == 0 and capsys.readouterr().err == ""  # a written root not made yet is no news


def test_every_json_output_that_reads_a_root_lists_the_files_it_could_not_read(capsys, tmp_path, root):
    """show --json left an unreadable file of the kernel out without a word (list --json has them)."""
    broken = cache_file(root, {**IDENTITY, "tag": "prod"}).path
    broken.parent.mkdir(parents=True)
    broken.write_text('{"broken')
    commands = [
        ["list"],
        ["show", "matmul"],
        ["export", str(tmp_path / "ship.tar.gz"), "--tag", "default"],
        ["export", str(tmp_path / "out"), "--tag", "default"],
        ["heuristic", "matmul", "--tag", "default", "--method", "nearest"],
    ]
    for argv in commands:
        assert run(*argv, "--root", str(root), "--json") == 0, argv
        payload = json.loads(capsys.readouterr().out)
        assert [p["path"] for p in payload["problems"]] == [str(broken)], argv
        assert "not JSON" in payload["problems"][0]["reason"]


def test_export_json_names_the_files_written_as_other_commands_name_them(capsys, tmp_path, root):
    """An archive's were member names, a folder's absolute paths: both are now where a reader finds them."""
    for out in (tmp_path / "ship.tar.gz", tmp_path / "out"):
        assert run("export", str(out), "--root", str(root), "--json") == 0
        written = json.loads(capsys.readouterr().out)["files"]
        assert written == [f.source for f in inventory.read_sources([out])[0]]


# --- a closed pipe ------------------------------------------------------------------------------------------


def test_list_into_head_ends_quietly(tmp_path):
    root = tmp_path / "root"
    for i in range(150):  # far more than a pipe buffer, so that the writer meets the closed pipe
        write_document(root / f"d{i}" / "cache.json", {**IDENTITY, "gpu": f"G{i}" + "x" * 4000}, {})
    err = tmp_path / "err"
    command = (
        f"{sys.executable} -m triton_dejavu_like list --root {root} 2>{err} | head -1; "
        'echo "status ${PIPESTATUS[0]}"'
    )
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=REPO, timeout=120)
    first, status = result.stdout.splitlines()
    assert first.split()[:2] == ["ID", "KERNEL"]
    assert err.read_text() == ""  # no "Broken pipe", no traceback
    assert status == "status 1"  # as Python itself exits on EPIPE


# --- nothing destroyed by a typo ------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["", " ", os.pathsep], ids=["empty", "blank", "separator only"])
@pytest.mark.parametrize(
    "command", [["prune", "--older-than", "0d"], ["merge", "{root}"], ["list"]], ids=lambda c: c[0]
)
def test_an_empty_root_is_refused_not_taken_as_the_default(capsys, root, monkeypatch, given, command):
    # `--root "$STORE"` with STORE unset must not act on the default storage
    monkeypatch.setenv(_env.STORAGE, str(root))
    before = sorted((p, p.read_bytes()) for p in root.rglob("*") if p.is_file())
    assert run(*[a.replace("{root}", str(root)) for a in command], "--root", given) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--root" in err and "Traceback" not in err, err
    assert sorted((p, p.read_bytes()) for p in root.rglob("*") if p.is_file()) == before


@pytest.mark.parametrize("command", [["prune", "--older-than", "0d"], ["list"]], ids=lambda c: c[0])
def test_a_root_list_with_an_empty_first_part_is_refused(capsys, root, command):
    # `--root "$RW:$BASE"` with RW unset: BASE is a read-only layer, never the root acted on
    before = sorted((p, p.read_bytes()) for p in root.rglob("*") if p.is_file())
    assert run(*command, "--root", os.pathsep + str(root)) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "first part" in err, err
    assert sorted((p, p.read_bytes()) for p in root.rglob("*") if p.is_file()) == before


@pytest.mark.parametrize(
    "command",
    [["export", ""], ["merge", ""], ["diff", "{root}", ""], ["import-dejavu", " "]],
    ids=lambda c: c[0],
)
def test_an_empty_path_argument_is_refused_not_taken_as_the_current_directory(
    capsys, root, tmp_path, monkeypatch, command
):
    # `export "$OUT"` with OUT unset must not export into (or read) the directory it was run from
    here = tmp_path / "here"
    here.mkdir()
    (here / "notes.txt").write_text("mine")
    monkeypatch.chdir(here)
    before = sorted((p, p.read_bytes()) for p in root.rglob("*") if p.is_file())
    with pytest.raises(SystemExit) as exit_:
        run(*[a.replace("{root}", str(root)) for a in command], "--root", str(root))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "empty path" in err and "Traceback" not in err, err
    assert [p.name for p in here.iterdir()] == ["notes.txt"]
    assert sorted((p, p.read_bytes()) for p in root.rglob("*") if p.is_file()) == before


def test_export_does_not_overwrite_an_archive_without_force(capsys, root, tmp_path):
    archive = tmp_path / "k.tar.gz"
    archive.write_bytes(b"precious")
    assert run("export", str(archive), "--root", str(root)) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err and archive.read_bytes() == b"precious"
    assert run("export", str(archive), "--root", str(root), "--force", "--dry-run") == 0
    out = capsys.readouterr().out
    assert out.startswith("would export") and f"would replace the existing {archive} (0 stored" in out
    assert archive.read_bytes() == b"precious"
    assert run("export", str(archive), "--root", str(root), "--force") == 0
    assert archive.read_bytes() != b"precious"
    assert run("export", str(root / "file.tar.gz"), "--root", str(root), "--dry-run") == 0
    assert not (root / "file.tar.gz").exists()


def test_export_into_a_file_that_is_not_an_archive_is_refused(capsys, root, tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    assert run("export", str(target), "--root", str(root)) == 2
    assert target.read_text() == "mine"


def test_force_on_an_export_into_a_directory_is_said_to_change_nothing(capsys, root, tmp_path):
    folder = tmp_path / "shipped"
    with pytest.warns(
        DejavuConfigWarning, match="export: --force has no effect when exporting into a directory"
    ):
        assert run("export", str(folder), "--root", str(root), "--force") == 0
    assert capsys.readouterr().out.startswith("exported")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuConfigWarning)
        assert run("export", str(tmp_path / "other"), "--root", str(root)) == 0


def test_merge_lists_the_stored_entries_it_replaces(capsys, root, tmp_path):
    newer = tmp_path / "newer"
    cache_file(newer).record(entries_for([(1,)], block=128, tuned_at="2030-01-01T00:00:00+00:00"))
    before = stored_entries(cache_file(root).path)
    assert run("merge", str(newer), "--root", str(root), "--dry-run") == 0
    out = capsys.readouterr().out
    assert f"would replace 1 stored entries in {cache_file(root).path}" in out
    assert stored_entries(cache_file(root).path) == before
    assert run("merge", str(newer), "--root", str(root)) == 0
    assert f"replaced 1 stored entries in {cache_file(root).path}" in capsys.readouterr().out


def test_merge_and_export_count_what_they_left_out(capsys, root, tmp_path):
    source = tmp_path / "source"
    bad = {**make_entry((3,)), "timings_ms": "fast"}
    write_document(cache_file(source).path, IDENTITY, {**entries_for([(4,)]), key_id((3,)): bad})
    (source / "junk").mkdir()
    (source / "junk" / "cache.json").write_text("{")
    assert run("merge", str(source), "--root", str(tmp_path / "dest"), "--skip-invalid") == 0
    assert "left out 1 unreadable file(s) and 1 invalid entries" in capsys.readouterr().out
    payload = json.loads(
        (run("export", str(tmp_path / "out"), "--root", str(source), "--json"), capsys.readouterr().out)[1]
    )
    assert payload["left_out"] == {"files": 1, "entries": 1}


# --- names that would drive the terminal ----------------------------------------------------------------

HOSTILE = "k\x1b[2J\x00\r\x07name\nfake"


def test_list_and_show_escape_control_characters(capsys, tmp_path):
    root = tmp_path / "root"
    ident = {**IDENTITY, "kernel": HOSTILE, "tag": "t\x1b]0;title\x07"}
    write_document(root / "x" / "cache.json", ident, entries_for([("\x1b[31mred", 1)]))
    assert run("list", "--root", str(root)) == 0
    listed = capsys.readouterr()
    assert run("show", HOSTILE, "--root", str(root), "--top") == 0
    shown = capsys.readouterr()
    for text in (listed.out, listed.err, shown.out, shown.err):
        assert not any(c in text for c in "\x1b\x00\r\x07"), text
    assert "k\\x1b[2J\\x00\\r\\x07name\\nfake" in listed.out and "\\x1b[31mred" in shown.out
    assert len(listed.out.splitlines()) == 3  # the newline in the name did not make a row


def test_printable_keeps_ordinary_text():
    assert cli.printable("matmul é 漢字 ok") == "matmul é 漢字 ok"
    assert cli.printable("a\nb", newlines=True) == "a\nb" and cli.printable("a\nb") == "a\\nb"


# --- links inside the root: the tuner and the commands see the same results ------------------------------


def test_a_directory_linked_elsewhere_is_seen_by_the_tuner_and_the_commands(capsys, tmp_path):
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    tuner = make_tuner(custom_data_storage=root)
    platform_dir = tuner.cache_path().relative_to(root).parts[0]
    elsewhere.mkdir()
    root.mkdir()
    (root / platform_dir).symlink_to(elsewhere, target_is_directory=True)
    launch(tuner, 100)  # the tuner writes through the link
    assert list(elsewhere.rglob("cache.json"))
    out = json.loads((run("list", "--root", str(root), "--json"), capsys.readouterr().out)[1])
    assert [Path(f["path"]) for f in out["files"]] == [tuner.cache_path()]
    bench = InstantBench()
    launch(make_tuner(bench=bench, custom_data_storage=root), 100)
    assert bench.calls == 0  # and restores through it
    assert run("prune", "--root", str(root), "--older-than", "2999-01-01") == 0
    assert not list(elsewhere.rglob("cache.json"))  # prune reached it too


def test_a_cache_file_linked_to_a_shared_file_is_written_through_and_stays_a_link(tmp_path):
    """Two roots whose cache.json links to one shared file: each tuner writes into that file (under
    its lock, which both share), the links stay, and a later process restores both keys."""
    roots, shared = [tmp_path / "a", tmp_path / "b"], tmp_path / "shared" / "matmul.json"
    first = make_tuner(custom_data_storage=roots[0])
    launch(first, 100)
    shared.parent.mkdir()
    first.cache_path().rename(shared)
    second = make_tuner(custom_data_storage=roots[1])
    for tuner in (first, second):
        tuner.cache_path().parent.mkdir(parents=True, exist_ok=True)
        tuner.cache_path().symlink_to(shared)
    launch(make_tuner(custom_data_storage=roots[1]), 200)  # a new process tunes a new key
    for tuner in (first, second):
        assert tuner.cache_path().is_symlink() and tuner.cache_path().resolve() == shared
    assert len(json.loads(shared.read_text())["entries"]) == 2
    locks = {CacheFile(tuner.cache_path(), {}).lock_path for tuner in (first, second)}
    assert locks == {shared.with_name("matmul.json.lock")}
    bench = InstantBench()
    later = make_tuner(bench=bench, custom_data_storage=roots[0])
    launch(later, 100)
    launch(later, 200)
    assert bench.calls == 0


def test_a_link_loop_is_walked_once(tmp_path):
    root = tmp_path / "root"
    cache_file(root).record(entries_for([(1,)]))
    (root / "loop").symlink_to(root, target_is_directory=True)
    (root / "loop2").symlink_to(root / "loop", target_is_directory=True)
    files, problems = inventory.read_sources([root])
    assert len(files) == 1 and not problems


def test_a_dangling_link_is_not_an_error(tmp_path, root):
    (root / "gone").symlink_to(tmp_path / "nothing", target_is_directory=True)
    files, problems = inventory.read_sources([root])
    assert len(files) == 1 and not problems
    assert os.path.islink(root / "gone")


def test_a_file_whose_identity_holds_a_non_string_is_a_problem_not_a_crash(capsys, tmp_path):
    root = tmp_path / "root"
    cf = cache_file(root)
    cf.record(entries_for([(1,)]))
    doc = json.loads(cf.path.read_text())
    doc["identity"]["extra"] = float("inf")  # written as Infinity, which JSON readers accept
    cf.path.write_text(json.dumps(doc))
    # list reports the file; export finds nothing to export (the only file is unusable)
    expected = (("list", 0, "identity field is not a string"), ("export", 1, "nothing stored matches"))
    for command, status, says in expected:
        argv = [command, "--root", str(root), "--json"] + (
            [str(tmp_path / "out")] if command == "export" else []
        )
        assert run(*argv) == status
        out = capsys.readouterr()
        assert "Traceback" not in out.err and says in out.out + out.err
    assert not (tmp_path / "out").exists()
    assert "identity field is not a string" in json.dumps(inventory.read_sources([root])[1][0].reason)
