"""``python -m triton_dejavu_like diff``: winners stored by several machines or ranks, compared."""

from __future__ import annotations

import json

import pytest
from storage_helpers import IDENTITY, entries_for, make_entry, write_document

from triton_dejavu_like.codec import key_id
from triton_dejavu_like.store import layout
from triton_dejavu_like.tools import cli


def store_at(root, entries, **identity):
    ident = {**IDENTITY, **identity}
    write_document(layout.cache_path(root, ident), ident, entries)


def run(capsys, *argv):
    status = cli.main(["diff", *map(str, argv)])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_identical_winners_exit_0(tmp_path, capsys):
    for name in ("a", "b"):
        store_at(tmp_path / name, entries_for([(1,), (2,)]))
    status, out, _ = run(capsys, tmp_path / "a", tmp_path / "b")
    assert status == 0
    assert out.startswith("2 key(s) stored by several sources, 0 with different winners")


def test_different_winners_are_listed_with_configs_and_timings(tmp_path, capsys):
    store_at(tmp_path / "a", {**entries_for([(1,)]), key_id((2,)): make_entry((2,), block=64, ms=1.5)})
    # another GPU: the platform is ignored by default
    store_at(
        tmp_path / "b", {**entries_for([(1,)]), key_id((2,)): make_entry((2,), block=32, ms=2.5)}, gpu="B"
    )
    status, out, _ = run(capsys, tmp_path / "a", tmp_path / "b")
    assert status == 1
    assert "1 with different winners" in out
    assert "key (2,)" in out
    assert "BLOCK=64" in out and "1.5 ms" in out and "BLOCK=32" in out and "2.5 ms" in out
    assert "gpu=B" in out
    status = cli.main(["diff", "--json", str(tmp_path / "a"), str(tmp_path / "b")])
    payload = json.loads(capsys.readouterr().out)
    assert status == 1
    [difference] = payload["differences"]
    assert difference["key"] == key_id((2,))
    assert sorted(w["config"]["kwargs"]["BLOCK"] for w in difference["winners"]) == [32, 64]


def test_match_gpu_compares_like_gpus_only(tmp_path, capsys):
    store_at(tmp_path / "a", {key_id((2,)): make_entry((2,), block=64)})
    store_at(tmp_path / "b", {key_id((2,)): make_entry((2,), block=32)}, gpu="B")
    status, out, _ = run(capsys, "--match", "gpu", tmp_path / "a", tmp_path / "b")
    assert status == 0
    assert "0 key(s) stored by several sources" in out and "2 key(s) stored by some sources only" in out


def test_other_kernels_and_keys_never_match(tmp_path, capsys):
    store_at(tmp_path / "a", {key_id((2,)): make_entry((2,), block=64)})
    store_at(tmp_path / "b", {key_id((3,)): make_entry((3,), block=32)})
    store_at(tmp_path / "b", {key_id((2,)): make_entry((2,), block=32)}, kernel="other")
    status, _, _ = run(capsys, tmp_path / "a", tmp_path / "b")
    assert status == 0


def test_ranks_of_one_machine_and_three_sources(tmp_path, capsys):
    for name, block in (("r0", 64), ("r1", 64), ("r2", 16)):
        store_at(tmp_path / name, {key_id((2,)): make_entry((2,), block=block)})
    status, out, _ = run(capsys, tmp_path / "r0", tmp_path / "r1", tmp_path / "r2")
    assert status == 1
    assert out.count("BLOCK=64") == 2 and out.count("BLOCK=16") == 1


def test_bad_sources(tmp_path, capsys):
    store_at(tmp_path / "a", entries_for([(1,)]))
    status, _, err = run(capsys, tmp_path / "a", tmp_path / "missing")
    assert status == 2 and "no such source" in err
    status, _, err = run(capsys, tmp_path / "a")
    assert status == 2 and "at least two" in err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "cache.json").write_text("{not json")
    status, _, err = run(capsys, tmp_path / "a", tmp_path / "bad")
    assert status == 2 and "cannot use" in err


@pytest.mark.parametrize("again", ["{a}", "{a}/.", "{b}/../a"])
def test_a_source_given_twice_is_a_mistake_not_an_agreement(tmp_path, capsys, again):
    """It was compared with nothing: "0 key(s) stored by several sources", exit 0 (the winners agree)."""
    for name in ("a", "b"):
        store_at(tmp_path / name, entries_for([(1,)], block=16 if name == "a" else 32))
    second = again.format(a=tmp_path / "a", b=tmp_path / "b")
    status, out, err = run(capsys, tmp_path / "a", second)
    assert status == 2 and not out
    assert len(err.splitlines()) == 1 and "one source given twice" in err, err
    status, _, _ = run(capsys, tmp_path / "a", tmp_path / "b")
    assert status == 1


def test_a_root_and_its_copy_are_the_same_whatever_platforms_and_tags_it_holds(tmp_path, capsys):
    """Each source's results for other GPUs and tags were compared with each other: a root diffed
    with its copy had every key "with different winners"."""
    for name in ("a", "b"):
        store_at(tmp_path / name, {key_id((2,)): make_entry((2,), block=64)})
        store_at(tmp_path / name, {key_id((2,)): make_entry((2,), block=32)}, gpu="B")
        store_at(tmp_path / name, {key_id((2,)): make_entry((2,), block=16)}, tag="prod")
    status, out, _ = run(capsys, tmp_path / "a", tmp_path / "b")
    assert status == 0, out
    assert out.startswith("3 key(s) stored by several sources, 0 with different winners")


def test_a_source_holding_several_platforms_is_compared_platform_by_platform(tmp_path, capsys):
    for name, other in (("a", 32), ("b", 16)):
        store_at(tmp_path / name, {key_id((2,)): make_entry((2,), block=64)})
        store_at(tmp_path / name, {key_id((2,)): make_entry((2,), block=other)}, gpu="B")
    status, out, _ = run(capsys, tmp_path / "a", tmp_path / "b")
    assert status == 1
    assert "2 key(s) stored by several sources, 1 with different winners" in out
    assert "key (2,) gpu=B:" in out and "BLOCK=64" not in out
    status = cli.main(["diff", "--json", str(tmp_path / "a"), str(tmp_path / "b")])
    [difference] = json.loads(capsys.readouterr().out)["differences"]
    assert status == 1 and difference["apart"] == {"gpu": "B"}


def test_a_key_one_source_stores_twice_is_not_stored_by_several_sources(tmp_path, capsys):
    store_at(tmp_path / "a", {key_id((2,)): make_entry((2,), block=64)})
    store_at(tmp_path / "a" / "backup", {key_id((2,)): make_entry((2,), block=32)})  # a copy, older
    store_at(tmp_path / "b", {key_id((3,)): make_entry((3,), block=64)})
    status, out, _ = run(capsys, tmp_path / "a", tmp_path / "b")
    assert status == 0
    assert out.startswith("0 key(s) stored by several sources, 0 with different winners; 2 key(s)")


def test_diff_takes_no_root(tmp_path, capsys):
    """It accepted --root and ignored it: the sources are what it reads."""
    for name in ("a", "b"):
        store_at(tmp_path / name, entries_for([(1,)]))
    with pytest.raises(SystemExit) as exc:
        cli.main(["diff", "--root", str(tmp_path / "a"), str(tmp_path / "a"), str(tmp_path / "b")])
    assert exc.value.code == 2 and "--root" in capsys.readouterr().err
