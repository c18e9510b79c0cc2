"""No tag, kernel, GPU or version string can put a file outside the storage root; names stay readable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from storage_helpers import IDENTITY, as_json, cache_file, entries_for, stored_entries

from triton_dejavu_like.store import layout
from triton_dejavu_like.store.identity import sanitize

NASTY = [
    "../../../etc",
    "..",
    ".",
    "",
    "/absolute/path",
    "a/b\\c",
    "  spaced name  ",
    "NVIDIA H100 80GB HBM3",
    "tab\tand\nnewline",
    "nul\x00byte",
    "ünïcödé-名前",
    "-leading-dash",
    "x" * 500,
    "~user",
    "$HOME",
    "C:\\Windows",
]


def identity_with(**names: str) -> dict[str, str]:
    return {**IDENTITY, **names}


@given(
    kernel=st.text(),
    tag=st.text(),
    gpu=st.text(),
    triton=st.text(),
    toolchain=st.text(),
)
@example(kernel="..", tag="../../..", gpu="/", triton="..", toolchain=".")
@settings(deadline=None)
def test_every_component_is_one_plain_path_segment(kernel, tag, gpu, triton, toolchain):
    rel = layout.relative_dir(
        identity_with(kernel=kernel, tag=tag, gpu=gpu, triton=triton, toolchain=toolchain)
    )
    assert len(rel.parts) == len(layout.IDENTITY_FIELDS)
    for part in rel.parts:
        assert part not in ("", ".", "..")
        assert "/" not in part and "\\" not in part and "\x00" not in part
        assert len(part) <= 80
    root = Path("/storage/root")
    assert os.path.normpath(root / rel).startswith(str(root) + os.sep)


@given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,60}[A-Za-z0-9]", fullmatch=True))
@settings(deadline=None)
def test_names_made_of_safe_characters_are_kept_as_they_are(name):
    assert sanitize(name) == name


@pytest.mark.parametrize("name", NASTY)
def test_a_nasty_name_writes_inside_the_root_and_reads_back(tmp_path, name):
    root = tmp_path / "root"
    ident = identity_with(kernel=name, tag=name, gpu=name)
    cf = cache_file(root, ident)
    assert cf.record(entries_for([(1,)]))
    assert as_json(cache_file(root, ident).load()) == entries_for([(1,)])
    [written] = list(root.rglob("cache.json"))
    assert written.resolve().is_relative_to(root.resolve())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]  # nothing beside the root


def test_names_stay_readable():
    rel = layout.relative_dir(
        identity_with(kernel="my kernel/v2", gpu="NVIDIA H100 80GB HBM3", tag="prod 2025")
    )
    assert rel.parts[3] == "gpu_NVIDIA_H100_80GB_HBM3"
    assert rel.parts[4] == "my_kernel_v2"
    assert rel.parts[-1] == "prod_2025"
    long = layout.relative_dir(identity_with(kernel="k" * 300)).parts[4]
    assert long.startswith("k" * 40) and len(long) <= 80  # truncated with a hash, still recognisable


def test_two_names_that_sanitise_alike_never_share_results(tmp_path):
    first, second = identity_with(tag="a b"), identity_with(tag="a_b")
    assert layout.relative_dir(first) == layout.relative_dir(second)
    assert cache_file(tmp_path, first).record(entries_for([(1,)]))
    other = cache_file(tmp_path, second)
    assert other.load() == {}  # made for another identity: not used ...
    assert not other.record(entries_for([(2,)]))  # ... and not overwritten
    assert list(stored_entries(other.path)) == list(entries_for([(1,)]))
