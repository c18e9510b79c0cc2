"""Two releases sharing one storage root (a rolling upgrade, a rollback): what this release cannot
read of a later release's file stays in that file as it is, and what it writes keeps it."""

from __future__ import annotations

import json
import warnings

import pytest
from storage_helpers import IDENTITY, aside_files, cache_file, entries_for, make_entry, write_document

import triton_dejavu_like as tdl
from triton_dejavu_like import store as storage
from triton_dejavu_like.codec import canonical_json, key_id
from triton_dejavu_like.store import tree_prune


def _later_release_entries() -> dict[str, dict]:
    """Entries a later release (or a newer torch) may write: typed values this release does not read."""
    tagged = make_entry((1,))
    tagged["key"] = [{"fp8": "e4m3"}]
    new_dtype = make_entry((2,))
    new_dtype["key"] = [{"torch.dtype": "float4_e9m9"}]
    return {canonical_json(e["key"]): e for e in (tagged, new_dtype)}


def test_entries_of_a_kind_this_release_does_not_read_are_kept_as_they_are(tmp_path):
    cf = cache_file(tmp_path)
    later = _later_release_entries()
    malformed = make_entry((3,))
    malformed["timings_ms"] = [-1.0]
    write_document(cf.path, IDENTITY, {**later, **entries_for([(4,)]), key_id((3,)): malformed})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(cf.load()) == [key_id((4,))]
        assert cf.record(entries_for([(5,)]))
        assert list(cf.load()) == [key_id((4,)), key_id((5,))]
    stored = json.loads(cf.path.read_text())["entries"]
    assert {kid: stored[kid] for kid in later} == later  # unchanged, not set aside
    [aside] = aside_files(cf.path, ".rejected-")
    assert list(json.loads(aside.read_text())["rejected"]) == [key_id((3,))]  # only the malformed one
    texts = [str(w.message) for w in caught if issubclass(w.category, tdl.DejavuStorageWarning)]
    assert len(texts) == 2, texts  # the malformed entry moved aside; the later ones left (once)
    assert any("2 entries of a kind this release does not read" in t for t in texts)


@pytest.mark.parametrize("repair", [True, False])
def test_loading_a_file_of_later_entries_only_rewrites_nothing(tmp_path, repair):
    cf = cache_file(tmp_path)
    data = write_document(cf.path, IDENTITY, {**_later_release_entries(), **entries_for([(4,)])})
    with pytest.warns(tdl.DejavuStorageWarning, match="stay in the file as they are"):
        assert list(cf.load(repair=repair)) == [key_id((4,))]
    assert cf.path.read_bytes() == data
    assert aside_files(cf.path, ".rejected-") == []


def test_a_malformed_value_is_still_set_aside():
    # a tag this release reads with a payload of the wrong shape is not a later release's value
    bad = make_entry((1,))
    bad["key"] = [{"torch.dtype": 3}]
    doc = storage.parse_document(
        storage.dump_document(storage.new_document(IDENTITY, {canonical_json(bad["key"]): bad}))
    )
    assert list(doc.rejected) and not doc.unknown


def test_prune_of_another_platform_removes_a_file_holding_later_entries(tmp_path):
    # the whole file goes, as prune reports: its entries of unknown kinds are set aside with it
    cf = cache_file(tmp_path, {**IDENTITY, "triton": "3.8.0"})
    later = _later_release_entries()
    write_document(cf.path, cf.identity, {**later, **entries_for([(4,)])})
    report = tree_prune.prune(tmp_path, keep={"triton": "3.9.0"})
    assert report.removed_files == [str(cf.path)]
    assert not cf.path.exists()
    [aside] = aside_files(cf.path, ".rejected-")
    assert sorted(json.loads(aside.read_text())["rejected"]) == sorted(later)
