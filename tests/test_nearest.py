"""The nearest-key index answers as a scan of every stored key does (the documented choice: least
log-scale distance among comparable keys whose config is a candidate, ties to the smaller key id),
on varied keys; and it follows the kernel's entries when they change."""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass, field
from typing import Any

import pytest
import triton
from hypothesis import example, given, settings
from hypothesis import strategies as st
from storage_helpers import make_entry

from triton_dejavu_like.codec import config_id, key_id
from triton_dejavu_like.store import StoredEntry
from triton_dejavu_like.tuner.nearest import KeyIndex, RestoredEntries, distance, nearest

NAN = float("nan")  # one object: a key holding it twice must still not be comparable with itself


class Act(str, enum.Enum):
    GELU = "gelu"


@dataclass(eq=False)
class Entry:
    """What the index reads of a stored entry."""

    key: tuple[Any, ...]
    config_id: str
    key_id: str = field(init=False)

    def __post_init__(self) -> None:
        try:
            self.key_id = key_id(self.key)
        except Exception:  # an Enum member, say: its repr sorts as well
            self.key_id = repr(self.key)


def scan(key, entries, allowed):
    """The straightforward choice: every entry compared with distance(), least (distance, key id)."""
    best = None
    for entry in entries:
        if entry.config_id not in allowed:
            continue
        d = distance(key, entry.key)
        if d is not None and (best is None or (d, entry.key_id) < best[:2]):
            best = (d, entry.key_id, entry)
    return None if best is None else best[2]


numbers = st.one_of(
    st.integers(-3, 70),
    st.sampled_from([0, 1, 1023, 1024, 4096, 2**40, -(2**20), True, 10**400, -(10**400)]),  # ints past floats
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-1e6, 1e6),
    st.just(NAN),
)
others = st.one_of(
    st.sampled_from(["torch.float16", "torch.float32", None, True, False, Act.GELU, "gelu", NAN]),
    st.tuples(st.integers(0, 2), st.integers(0, 2)),
    st.lists(st.integers(0, 1), max_size=2),  # not hashable: compared one by one
)
values = st.one_of(numbers, numbers, others)
keys = st.lists(values, min_size=0, max_size=4).map(tuple)
CONFIGS = ("A", "B", "C")


@settings(max_examples=400, deadline=None)
@given(
    stored=st.lists(st.tuples(keys, st.sampled_from(CONFIGS)), max_size=40),
    queries=st.lists(keys, min_size=1, max_size=8),
    allowed=st.sets(st.sampled_from(CONFIGS)),
)
@example(  # three equal distances: the smallest key id wins
    stored=[((63, "f"), "A"), ((15, "f"), "B"), ((31, "g"), "A")], queries=[(31, "f")], allowed={"A", "B"}
)
def test_the_index_chooses_as_a_scan_of_every_key(stored, queries, allowed):
    entries = [Entry(key, cid) for key, cid in stored]
    index = KeyIndex(entries)
    for query in queries:
        assert index.nearest(query, allowed) is scan(query, entries, allowed)


@settings(max_examples=200, deadline=None)
@given(
    stored=st.lists(
        st.tuples(st.integers(1, 1 << 16), st.floats(0.5, 1e5), st.integers(1, 64), st.sampled_from("xy")),
        min_size=1,
        max_size=60,
    ),
    query=st.tuples(st.integers(1, 1 << 16), st.floats(0.5, 1e5), st.integers(1, 64), st.sampled_from("xy")),
)
def test_sums_over_several_numbers_are_the_scans_to_the_last_bit(stored, query):
    """Distances are summed position by position in key order, as distance() sums them: near ties
    between sums of several log-scaled numbers go the same way."""
    entries = [Entry(key, "A") for key in stored]
    assert KeyIndex(entries).nearest(query, {"A"}) is scan(query, entries, {"A"})


@pytest.mark.parametrize(
    ("query", "stored", "chosen"),
    [
        ((24, 6, 29), [(43, 33, 7), (33, 43, 7)], (33, 43, 7)),
        ((29, 46, 2), [(1, 22, 41), (22, 1, 41)], (1, 22, 41)),
    ],
)
def test_a_tie_is_a_tie_only_when_summed_in_key_order(query, stored, chosen):
    """Both keys lie at the same distance summed in key order (the tie goes to the smaller key id);
    summed in another order, the last bits differ and the other key would win."""
    entries = [Entry(key, "A") for key in stored]
    assert distance(query, stored[0]) == distance(query, stored[1])
    assert KeyIndex(entries).nearest(query, {"A"}).key == chosen == scan(query, entries, {"A"}).key


def entry(key, block):
    return StoredEntry.from_json(key_id(key), make_entry(key, block, num_warps=1))


def test_nearest_returns_the_matching_candidate_and_follows_the_entries_as_they_change():
    candidates = [triton.Config({"BLOCK": b}, num_warps=1) for b in (16, 32, 64)]
    restored = RestoredEntries({key_id((64, "f")): entry((64, "f"), 32)})
    first = restored.key_index()
    found, config = nearest((100, "f"), first, candidates, config_id)
    assert config is candidates[1] and found.key == (64, "f")
    assert restored.key_index() is first  # built once for the same entries

    restored[key_id((128, "f"))] = entry((128, "f"), 64)  # a key tuned meanwhile
    assert nearest((100, "f"), restored.key_index(), candidates, config_id)[1] is candidates[2]
    restored[key_id((128, "f"))] = entry((128, "f"), 16)  # the same key, another winner
    assert nearest((100, "f"), restored.key_index(), candidates, config_id)[1] is candidates[0]
    restored.update({key_id((101, "f")): entry((101, "f"), 32)})
    assert nearest((100, "f"), restored.key_index(), candidates, config_id)[1] is candidates[1]
    del restored[key_id((101, "f"))]
    assert nearest((100, "f"), restored.key_index(), candidates, config_id)[1] is candidates[0]
    restored.clear()
    assert nearest((100, "f"), restored.key_index(), candidates, config_id) is None


@pytest.mark.parametrize(
    "change",
    [
        lambda r, k, e: r.__setitem__(k, e),
        lambda r, k, e: r.update({k: e}),
        lambda r, k, e: r.setdefault(k, e),
        lambda r, k, e: r.__ior__({k: e}),
    ],
    ids=["setitem", "update", "setdefault", "ior"],
)
def test_every_way_of_adding_an_entry_drops_the_index(change):
    restored = RestoredEntries()
    empty = restored.key_index()
    change(restored, key_id((1,)), entry((1,), 16))
    assert restored.key_index() is not empty
    assert restored.key_index().nearest((2,), {restored[key_id((1,))].config_id}) is not None


def test_a_str_enum_key_value_is_kept_in_memory_as_a_later_process_reads_it():
    """A key value that is a str-Enum member: the entry the tuning process kept held the member, a
    later process decoded a plain str, and the nearest key (types must match) answered differently
    in the two."""
    config = triton.Config({"BLOCK": 32}, num_warps=1)
    tuned = StoredEntry.new(
        (Act.GELU, 4096), config, [1.0], evaluated=1, space_size=1, strategy="exhaustive", tuning_time_s=0.1
    )
    reread = StoredEntry.from_json(tuned.key_id, json.loads(json.dumps(tuned.to_json())))
    assert [type(v) for v in tuned.key] == [type(v) for v in reread.key] == [str, int]
    assert tuned.key == reread.key and tuned.key_id == key_id((Act.GELU, 4096)) == key_id(("gelu", 4096))
    for miss in [(Act.GELU, 4000), ("gelu", 4000)]:
        in_memory = KeyIndex([tuned]).nearest(miss, {tuned.config_id})
        assert (in_memory is None) == (KeyIndex([reread]).nearest(miss, {reread.config_id}) is None)


def test_an_int_too_large_for_a_float_is_a_size_as_any_int():
    """A stored key holding an int past the float range (a constexpr key argument, a file merged from
    elsewhere) raised OverflowError while the index was built, so every miss of the kernel with tuning
    off failed; it is a number like any int, far from the small sizes."""
    huge = 10**400
    assert distance((huge,), (8,)) == pytest.approx(math.log2(1 + huge) - math.log2(9))
    assert distance((-huge,), (huge,)) == pytest.approx(2 * math.log2(1 + huge))
    entries = [Entry((huge, "f"), "A"), Entry((64, "f"), "B")]
    assert KeyIndex(entries).nearest((100, "f"), {"A", "B"}).key == (64, "f")
    assert KeyIndex(entries).nearest((10**399, "f"), {"A", "B"}).key == (huge, "f")
