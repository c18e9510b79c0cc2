"""The cache file: format, bad input, identity, permissions, and what a kernel does about each.

Every bad-input case checks the same promise: one warning naming the file, the file (or the bad
entry) moved aside and never deleted, and the kernel tuning as if nothing was stored.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from storage_helpers import (
    IDENTITY,
    InstantBench,
    as_json,
    aside_files,
    cache_file,
    double_kernel,
    entries_for,
    launch,
    make_entry,
    make_tuner,
    negate_kernel,
    stored_entries,
    write_document,
)

from triton_dejavu_like import store as storage
from triton_dejavu_like.codec import encode_config, key_id
from triton_dejavu_like.store import document, layout
from triton_dejavu_like.store import files as store_files

LOGGER = "triton_dejavu_like"


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name.startswith(LOGGER)]


@pytest.fixture
def warnings(caplog):
    caplog.set_level("WARNING", logger=LOGGER)
    return lambda: warnings_of(caplog)


# --- the format ---------------------------------------------------------------------------------------


def test_record_and_load_round_trip_in_the_documented_format(tmp_path):
    cf = cache_file(tmp_path)
    entries = entries_for([(128, "torch.float16"), (256, "torch.float16")])
    assert cf.record(entries)
    assert cf.path == tmp_path / layout.relative_dir(IDENTITY) / "cache.json"
    doc = json.loads(cf.path.read_text())
    assert doc == {"schema": storage.SCHEMA_VERSION, "identity": IDENTITY, "entries": entries}
    assert as_json(cache_file(tmp_path).load()) == entries


def test_new_results_win_per_key_and_other_keys_are_kept(tmp_path):
    cf = cache_file(tmp_path)
    cf.record(entries_for([(1,), (2,)], block=16))
    cf.record(entries_for([(2,), (3,)], block=32))
    blocks = {kid: e.config.kwargs["BLOCK"] for kid, e in cf.load().items()}
    assert blocks == {key_id((1,)): 16, key_id((2,)): 32, key_id((3,)): 32}


def test_an_entry_that_cannot_be_stored_is_refused_not_written(tmp_path, warnings):
    cf = cache_file(tmp_path)
    bad = make_entry((1,))
    bad["timings_ms"] = [float("inf")] * 3
    assert not cf.record({key_id((1,)): bad})
    assert not cf.path.exists()
    assert len(warnings()) == 1 and "not storing" in warnings()[0]
    assert cf.record({**entries_for([(2,)]), key_id((1,)): bad})  # the valid one still lands
    assert list(cf.load()) == [key_id((2,))]


# --- whole files that cannot be read --------------------------------------------------------------------

VALID = storage.dump_document(storage.new_document(IDENTITY, entries_for([(1,), (2,)])))


def _with(**changes) -> bytes:
    doc = json.loads(VALID)
    doc.update(changes)
    return json.dumps(doc).encode()


BAD_FILES = {
    "truncated JSON": VALID[: len(VALID) // 2],
    "empty file": b"",
    "not UTF-8": b'{"schema": 1, "identity": "\xff\xfe"}',
    "a list, not an object": b"[1, 2, 3]",
    "entries as a list": _with(entries=[1, 2]),
    "identity missing": _with(identity=None),
    "identity field of the wrong type": _with(identity={**IDENTITY, "triton": 3.9}),
    "schema version 0": _with(schema=0),
    "schema version as a string": _with(schema="1"),
    "schema version missing": _with(schema=None),
    "schema version true": _with(schema=True),
    "nested a million levels deep": b"[" * 1_000_000 + b"]" * 1_000_000,
    "an integer of 5000 digits": b'{"schema": ' + b"9" * 5000 + b"}",
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_an_unreadable_file_is_moved_aside_with_one_warning(tmp_path, warnings, case):
    cf = cache_file(tmp_path)
    cf.path.parent.mkdir(parents=True)
    cf.path.write_bytes(BAD_FILES[case])
    assert cf.load() == {}
    messages = warnings()
    assert len(messages) == 1 and str(cf.path) in messages[0], messages
    [aside] = aside_files(cf.path, layout.CORRUPT_SUFFIX)
    assert aside.read_bytes() == BAD_FILES[case]  # moved, byte for byte, never deleted
    assert not cf.path.exists()
    assert cf.record(entries_for([(3,)]))  # and the next result starts a fresh file
    assert list(stored_entries(cf.path)) == [key_id((3,))]


def test_a_huge_file_is_moved_aside_without_being_read(tmp_path, warnings):
    cf = cache_file(tmp_path)
    cf.path.parent.mkdir(parents=True)
    with open(cf.path, "wb") as handle:  # sparse: costs no disk and no time
        handle.truncate(store_files.MAX_FILE_BYTES + 1)
    assert cf.load() == {}
    assert len(warnings()) == 1 and "limit" in warnings()[0] and str(cf.path) in warnings()[0]
    [aside] = aside_files(cf.path, layout.CORRUPT_SUFFIX)
    assert aside.stat().st_size == store_files.MAX_FILE_BYTES + 1


def test_a_record_that_would_outgrow_the_limit_keeps_the_stored_file(tmp_path, warnings, monkeypatch):
    # a file the writers let grow over the limit would be set aside, whole, by the next reader
    cf = cache_file(tmp_path)
    assert cf.record(entries_for([(1,), (2,)]))
    monkeypatch.setattr(store_files, "MAX_FILE_BYTES", cf.path.stat().st_size + 100)
    assert not cf.record(entries_for([(3,), (4,)]))  # kept in memory, with a warning
    assert len(warnings()) == 1 and "limit" in warnings()[0] and str(cf.path) in warnings()[0]
    assert sorted(cache_file(tmp_path).load()) == sorted([key_id((1,)), key_id((2,))])
    assert aside_files(cf.path, layout.CORRUPT_SUFFIX) == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_place_of_the_file_does_not_block(tmp_path, warnings):
    cf = cache_file(tmp_path)
    cf.path.parent.mkdir(parents=True)
    os.mkfifo(cf.path)
    assert cf.load() == {}
    assert "not a regular file" in warnings()[0]


@pytest.mark.parametrize("case", ["truncated JSON", "not UTF-8", "schema version 0", "entries as a list"])
def test_a_kernel_tunes_as_if_nothing_was_stored(tmp_path, warnings, case):
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    path = tuner.cache_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(BAD_FILES[case])
    launch(tuner, 100)
    assert tuner.last_decision == "tuned" and bench.calls == 3
    assert len(warnings()) == 1 and str(path) in warnings()[0]
    assert [a.read_bytes() for a in aside_files(path, layout.CORRUPT_SUFFIX)] == [BAD_FILES[case]]
    assert [e["key"][0] for e in stored_entries(path).values()] == [100]


# --- single invalid entries ---------------------------------------------------------------------------


def _bad_entry(case: str) -> tuple[dict, bytes | None]:
    """An entry for key (2,) broken in one way (and, for a raw JSON literal, the text to patch in)."""
    entry = make_entry((2,))
    if case == "NaN timing":
        entry["timings_ms"] = [{"float": "nan"}, 1.0, 1.0]
    elif case == "inf timing (1e999)":
        entry["timings_ms"] = ["INF_PLACEHOLDER", 1.0, 1.0]
        return entry, b"1e999"
    elif case == "NaN literal":
        entry["timings_ms"] = ["INF_PLACEHOLDER", 1.0, 1.0]
        return entry, b"NaN"
    elif case == "negative timing":
        entry["timings_ms"] = [-1.0, 1.0, 1.0]
    elif case == "config naming a parameter the kernel lacks":
        entry["config"]["kwargs"] = {"BLOCK_Q": 64}
    elif case == "unknown config field":
        entry["config"]["num_teams"] = 2
    elif case == "count of the wrong type":
        entry["evaluated"] = "3"
    elif case == "key filed under another name":
        entry["key"] = [3]
    elif case == "tuned_at not a time":
        entry["tuned_at"] = "yesterday"
    elif case == "tuned_at outside the calendar in UTC":
        entry["tuned_at"] = "0001-01-01T00:00:00+23:59"
    elif case == "400-digit integer timing":
        entry["timings_ms"] = [10**400, 1.0, 1.0]
    elif case == "400-digit integer tuning time":
        entry["tuning_time_s"] = -(10**400)
    elif case == "ruled_out not a list":
        entry["ruled_out"] = {"reason": "x"}
    elif case == "an entry that is a string":
        entry = "BLOCK: 64, num_warps: 4"
    return entry, None


ENTRY_CASES = [
    "NaN timing",
    "inf timing (1e999)",
    "NaN literal",
    "negative timing",
    "config naming a parameter the kernel lacks",
    "unknown config field",
    "count of the wrong type",
    "key filed under another name",
    "tuned_at not a time",
    "tuned_at outside the calendar in UTC",
    "400-digit integer timing",
    "400-digit integer tuning time",
    "ruled_out not a list",
    "an entry that is a string",
]


def _file_with_bad_entry(path: Path, identity: dict, case: str, good_key=(1,), bad_key=(2,)) -> bytes:
    bad, literal = _bad_entry(case)
    if isinstance(bad, dict) and bad.get("key") == [2]:
        bad["key"] = [bad_key[0]]
    data = write_document(path, identity, {**entries_for([good_key]), key_id(bad_key): bad})
    if literal is not None:
        data = data.replace(b'"INF_PLACEHOLDER"', literal)
        path.write_bytes(data)
    return data


@pytest.mark.parametrize(
    ("text", "microsecond"),
    [
        ("2025-03-01T10:00:00Z", 0),
        ("2025-03-01T10:00:00.123456789Z", 123456),
        ("2025-03-01T11:00:00,5+01:00", 500000),
    ],
)
def test_a_tuned_at_that_python_3_11_reads_is_kept_under_every_python(tmp_path, warnings, text, microsecond):
    """A time with a "Z" or a fraction of other than 3 or 6 digits (as JavaScript and Go write them) is
    read by Python 3.11+; 3.10 moved the entry aside as invalid, also out of a store that processes
    of a newer Python share. (It can only fail under Python 3.10.)"""
    cf = cache_file(tmp_path)
    entry = make_entry((1,))
    entry["tuned_at"] = text
    write_document(cf.path, IDENTITY, {key_id((1,)): entry})
    [loaded] = cf.load().values()
    assert loaded.tuned_at == dt.datetime(2025, 3, 1, 10, 0, 0, microsecond, tzinfo=dt.timezone.utc)
    assert warnings() == [] and aside_files(cf.path, layout.REJECTED_SUFFIX) == []


@pytest.mark.parametrize("case", ENTRY_CASES)
def test_an_invalid_entry_is_set_aside_and_the_rest_is_kept(tmp_path, warnings, case):
    cf = cache_file(tmp_path)
    _file_with_bad_entry(cf.path, IDENTITY, case)
    assert list(cf.load()) == [key_id((1,))]
    messages = warnings()
    assert len(messages) == 1 and str(cf.path) in messages[0], messages
    [aside] = aside_files(cf.path, layout.REJECTED_SUFFIX)
    rejected = json.loads(aside.read_text())["rejected"]
    assert list(rejected) == [key_id((2,))] and rejected[key_id((2,))]["reason"]
    assert list(stored_entries(cf.path)) == [key_id((1,))]  # the file now holds only valid entries
    assert cache_file(tmp_path).load() == cf.load()


@pytest.mark.parametrize(
    "case",
    [
        "NaN timing",
        "config naming a parameter the kernel lacks",
        "tuned_at outside the calendar in UTC",
        "400-digit integer timing",
    ],
)
def test_a_kernel_uses_the_valid_entries_and_retunes_the_invalid_one(tmp_path, warnings, case):
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    ident = tuner.kernel_identity(_platform(tuner)).as_dict()
    f32 = "torch.float32"
    _file_with_bad_entry(tuner.cache_path(), ident, case, good_key=(100, f32, f32), bad_key=(200, f32, f32))
    launch(tuner, 100)
    assert tuner.last_decision == "restored" and bench.calls == 0
    launch(tuner, 200)
    assert tuner.last_decision == "tuned" and bench.calls == 3
    assert len(warnings()) == 1 and str(tuner.cache_path()) in warnings()[0]
    assert sorted(e["key"][0] for e in stored_entries(tuner.cache_path()).values()) == [100, 200]
    assert len(aside_files(tuner.cache_path(), layout.REJECTED_SUFFIX)) == 1


def _platform(tuner):
    from triton_dejavu_like import _compat
    from triton_dejavu_like.store import identity

    return identity.detect_platform(_compat.is_interpreted(tuner.fn))


# --- files that are someone else's: another identity, a newer schema ------------------------------------


@pytest.mark.parametrize("kind", ["another identity", "a newer schema"])
def test_a_file_that_is_not_ours_is_never_used_nor_overwritten(tmp_path, warnings, kind):
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    ident = tuner.kernel_identity(_platform(tuner)).as_dict()
    entries = entries_for([(100, "torch.float32", "torch.float32")])
    if kind == "another identity":
        data = write_document(tuner.cache_path(), {**ident, "gpu": "NVIDIA_A100"}, entries)
    else:
        doc = storage.new_document(ident, entries)
        doc["schema"] = storage.SCHEMA_VERSION + 1
        data = json.dumps(doc).encode()
        tuner.cache_path().parent.mkdir(parents=True)
        tuner.cache_path().write_bytes(data)
    launch(tuner, 100)
    launch(tuner, 200)
    assert tuner.last_decision == "tuned" and bench.calls == 6  # tuned both, stored neither
    launch(tuner, 100)
    assert bench.calls == 6  # kept in memory
    assert tuner.cache_path().read_bytes() == data
    assert sorted(p.name for p in tuner.cache_path().parent.iterdir()) == ["cache.json", "cache.json.lock"]
    assert len(warnings()) == 1 and str(tuner.cache_path()) in warnings()[0]


def test_a_file_that_cannot_be_read_is_not_overwritten(tmp_path, warnings, monkeypatch):
    cf = cache_file(tmp_path)
    original = write_document(cf.path, IDENTITY, entries_for([(1,)]))

    def denied(path, max_bytes=None):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(store_files, "read_bounded", denied)
    assert cf.load() == {}
    assert not cf.record(entries_for([(2,)]))
    assert cf.path.read_bytes() == original
    assert len(warnings()) == 1 and str(cf.path) in warnings()[0]


# --- permissions ----------------------------------------------------------------------------------------


def test_a_storage_root_that_cannot_be_created_gives_one_warning_for_all_kernels(tmp_path, warnings):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the storage root should be")
    root = blocker / "storage"
    bench = InstantBench()
    tuners = [
        make_tuner(kernel, bench=bench, custom_data_storage=root) for kernel in (double_kernel, negate_kernel)
    ]
    for n in (100, 200):
        launch(tuners[0], n)
        launch(tuners[1], n, expected=lambda x: -x)
    assert bench.calls == 12
    for n in (100, 200):  # results stay in memory
        launch(tuners[0], n)
        launch(tuners[1], n, expected=lambda x: -x)
    assert bench.calls == 12
    messages = warnings()
    assert len(messages) == 1 and str(root) in messages[0] and "in memory" in messages[0], messages


READ_ONLY_SCRIPT = """
import json, logging, os, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from storage_helpers import InstantBench, launch, make_tuner, negate_kernel

records = []
handler = logging.Handler(logging.WARNING)
handler.emit = lambda record: records.append(record.getMessage())
logging.getLogger("triton_dejavu_like").addHandler(handler)
root = Path(sys.argv[1])
bench = InstantBench()
double = make_tuner(bench=bench, custom_data_storage=root)
negate = make_tuner(negate_kernel, bench=bench, custom_data_storage=root)
decisions = []
for n in (100, 200):
    launch(double, n)
    decisions.append(double.last_decision)
    launch(negate, n, expected=lambda x: -x)
    decisions.append(negate.last_decision)
print(json.dumps({{"decisions": decisions, "benchmarks": bench.calls, "warnings": records,
                  "euid": os.geteuid()}}))
"""


def _unprivileged() -> list[str] | None:
    """A command prefix that runs Python without the power to ignore file permissions (or None)."""
    if not hasattr(os, "geteuid"):
        return None
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    probe = subprocess.run([setpriv, "--inh-caps=-all", "--bounding-set=-all", "true"], capture_output=True)
    return [setpriv, "--inh-caps=-all", "--bounding-set=-all"] if probe.returncode == 0 else None


def test_a_read_only_storage_restores_what_it_has_and_warns_once(tmp_path):
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("running as root without setpriv: permissions cannot be enforced")
    root = tmp_path / "store"
    seed = make_tuner(custom_data_storage=root)
    launch(seed, 100)  # one stored result for one kernel
    script = tmp_path / "read_only.py"
    script.write_text(READ_ONLY_SCRIPT.format(tests=str(Path(__file__).parent)))
    for directory in [root, *root.rglob("*")]:
        if directory.is_dir():
            directory.chmod(0o555)
    try:
        result = subprocess.run(
            [*prefix, sys.executable, str(script), str(root)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "TRITON_INTERPRET": "1"},
        )
    finally:
        for directory in [root, *root.rglob("*")]:
            if directory.is_dir():
                directory.chmod(0o755)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["decisions"] == ["restored", "tuned", "tuned", "tuned"]
    assert out["benchmarks"] == 9
    [message] = out["warnings"]
    assert str(root) in message and "in memory" in message


def test_files_and_directories_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        cf = cache_file(tmp_path / "root")
        assert cf.record(entries_for([(1,)]))
    finally:
        os.umask(old)
    assert stat.S_IMODE(cf.path.stat().st_mode) == 0o640
    assert stat.S_IMODE(cf.lock_path.stat().st_mode) == 0o640
    assert stat.S_IMODE(cf.path.parent.stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "root" / "dejavu_0.1").stat().st_mode) == 0o750


def test_the_filelock_required_leaves_the_lock_file_to_the_umask():
    # filelock 3.12 to 3.23 create (and chmod) every lock file 0o644 whatever the umask: in a
    # group's store the first writer's lock file then shut every other member out of writing
    # (their results stayed in memory); the lock file stays, so for good
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    floor = re.search(r'"filelock>=([0-9.]+)"', text)
    assert floor is not None
    assert tuple(int(part) for part in floor.group(1).split(".")) >= (3, 24)


def test_a_replaced_file_keeps_its_permissions(tmp_path):
    cf = cache_file(tmp_path)
    cf.record(entries_for([(1,)]))
    cf.path.chmod(0o664)  # e.g. shared with a group on purpose
    cf.record(entries_for([(2,)]))
    assert stat.S_IMODE(cf.path.stat().st_mode) == 0o664
    assert len(cf.load()) == 2


def _another_group() -> int | None:
    """A group this process may give its files: any as root, else a supplementary group."""
    if os.geteuid() == 0:
        return os.getegid() + 4242
    return next((g for g in os.getgroups() if g != os.getegid()), None)


def test_a_replaced_file_keeps_its_group_and_owner(tmp_path):
    # a store shared by a group without a set-group-ID directory: the writer's own group would
    # take the file from the team (mode 0o660: the others could no longer read it)
    group = _another_group()
    if group is None:
        pytest.skip("this process belongs to one group only")
    cf = cache_file(tmp_path)
    cf.record(entries_for([(1,)]))
    owner = os.geteuid() + 4242 if os.geteuid() == 0 else os.geteuid()
    os.chown(cf.path, owner, group)
    cf.path.chmod(0o660)
    cf.record(entries_for([(2,)]))
    after = cf.path.stat()
    assert (after.st_gid, after.st_uid, stat.S_IMODE(after.st_mode)) == (group, owner, 0o660)
    assert len(cf.load()) == 2


# --- nothing read is executed ------------------------------------------------------------------------------


def test_a_file_crafted_to_run_code_runs_nothing(tmp_path, warnings):
    marker = tmp_path / "pwned"
    payload = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    cf = cache_file(tmp_path)
    entry = make_entry((1,))
    entry["config"] = {**encode_config(__import__("triton").Config({"BLOCK": 64})), "pre_hook": payload}
    entry["key"] = [{"tuple": [payload]}]
    evil_dtype = make_entry((2,))
    evil_dtype["key"] = [{"torch.dtype": payload}]
    write_document(cf.path, IDENTITY, {"k1": entry, key_id((2,)): evil_dtype, key_id((3,)): make_entry((3,))})
    assert list(cf.load()) == [key_id((3,))]
    assert not marker.exists()
    assert len(warnings()) == 1


def test_load_without_a_file_creates_nothing(tmp_path):
    cf = cache_file(tmp_path / "root")
    assert cf.load() == {}
    assert not (tmp_path / "root").exists()


def test_the_python_api_rejects_a_document_it_cannot_use():
    with pytest.raises(storage.InvalidCacheFile, match="schema"):
        storage.parse_document(b'{"schema": 99}')
    doc = storage.parse_document(VALID)
    assert sorted(doc.entries) == sorted(entries_for([(1,), (2,)])) and doc.rejected == {}


def test_looking_up_one_key_validates_that_entry_only(tmp_path, monkeypatch):
    """A process waiting for another one's result looks its key up in the file again and again: in a
    file of thousands of keys, validating every entry each time cost seconds per look."""
    cf = cache_file(tmp_path)
    entries = entries_for([(n,) for n in range(50)])
    entries[key_id((7,))] = {**entries[key_id((7,))], "timings_ms": ["fast"]}  # invalid
    write_document(cf.path, IDENTITY, entries)
    validated = []
    from_json = storage.StoredEntry.from_json

    def counting(kid, data, **kwargs):
        validated.append(kid)
        return from_json(kid, data, **kwargs)

    monkeypatch.setattr(storage.StoredEntry, "from_json", counting)
    assert cf.peek(key_id((3,))).key == (3,)
    assert cf.peek(key_id((7,))) is None  # that entry is invalid
    assert cf.peek(key_id((99,))) is None  # not stored
    assert validated == [key_id((3,)), key_id((7,))]


# --- a file of many keys --------------------------------------------------------------------------------


def _count_validations(monkeypatch) -> list[str]:
    validated: list[str] = []
    from_json = storage.StoredEntry.from_json

    def counting(kid, data, **kwargs):
        validated.append(kid)
        return from_json(kid, data, **kwargs)

    monkeypatch.setattr(storage.StoredEntry, "from_json", counting)
    return validated


def test_recording_keys_one_at_a_time_validates_and_serializes_each_entry_once(tmp_path, monkeypatch):
    """A serving engine keyed by token count records thousands of keys into one file, one per new
    shape: parsing and dumping the whole file under the lock at each record made warming up a file
    of 10,000 keys cost seconds per key (quadratic in the keys)."""
    cf = cache_file(tmp_path)
    validated = _count_validations(monkeypatch)
    serialized: list[str] = []
    entry_text = document.entry_text
    counting = lambda kid, e: serialized.append(kid) or entry_text(kid, e)  # noqa: E731
    monkeypatch.setattr(document, "entry_text", counting)
    n = 30
    for i in range(n):
        assert cf.record(entries_for([(i,)]))
        assert cf.peek(key_id((i,))).key == (i,)
    assert len(validated) == n  # each given as JSON once, never re-read from the file
    assert len(serialized) == n
    assert stored_entries(cf.path) == entries_for([(i,) for i in range(n)])
    assert as_json(cache_file(tmp_path).load()) == entries_for([(i,) for i in range(n)])


def test_what_another_writer_stored_meanwhile_is_kept(tmp_path, monkeypatch):
    ours, theirs = cache_file(tmp_path), cache_file(tmp_path)
    assert ours.record(entries_for([(1,), (2,)]))
    validated = _count_validations(monkeypatch)
    assert theirs.record(entries_for([(3,)], block=32))
    assert ours.record(entries_for([(4,)]))
    assert sorted(validated) == sorted([key_id((1,)), key_id((2,)), key_id((3,)), key_id((4,)), key_id((3,))])
    assert stored_entries(ours.path) == {**entries_for([(1,), (2,), (4,)]), **entries_for([(3,)], block=32)}


def test_a_file_replaced_with_the_same_size_and_time_is_read_again(tmp_path):
    """What was read before is recognised by the file's bytes, not by its size and times (a file
    rewritten within the clock's tick by a same-sized result looks unchanged to ``stat``)."""
    cf = cache_file(tmp_path)
    assert cf.record(entries_for([(1,)], block=16))
    before = os.stat(cf.path)
    other = write_document(cf.path, IDENTITY, entries_for([(1,)], block=32))
    assert len(other) == before.st_size
    os.utime(cf.path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert cf.peek(key_id((1,))).config.kwargs["BLOCK"] == 32
    assert cf.load()[key_id((1,))].config.kwargs["BLOCK"] == 32
    assert cf.record(entries_for([(2,)]))
    assert stored_entries(cf.path) == {**entries_for([(1,)], block=32), **entries_for([(2,)])}


def test_an_entry_damaged_on_disk_after_it_was_read_is_set_aside(tmp_path, warnings):
    cf = cache_file(tmp_path)
    assert cf.record(entries_for([(1,), (2,)]))
    bad = {**make_entry((2,)), "timings_ms": ["fast"]}
    write_document(cf.path, IDENTITY, {**entries_for([(1,)]), key_id((2,)): bad})
    assert list(cf.load()) == [key_id((1,))]
    assert len(aside_files(cf.path, layout.REJECTED_SUFFIX)) == 1


def test_a_document_assembled_from_entry_texts_is_the_dumped_document():
    identity = {**IDENTITY, "tag": 'ünïcode "quoted"\n'}
    parsed = storage.parse_document(
        storage.dump_document(storage.new_document(identity, entries_for([(1,), (2, "é"), (-3, None)])))
    )
    texts = [document.entry_text(kid, parsed.entries[kid]) for kid in sorted(parsed.entries)]
    expected = storage.dump_document(storage.new_document(identity, parsed.entries))
    assert document.assemble_document(identity, texts) == expected
    empty = storage.dump_document(storage.new_document(identity, {}))
    assert document.assemble_document(identity, []) == empty


def test_an_entry_changed_by_its_caller_after_a_record_is_stored_again(tmp_path):
    """The file keeps its own copy: a dict recorded, changed and recorded again is stored changed
    (the first record's entry held the caller's dict, so the second looked unchanged)."""
    cf = cache_file(tmp_path)
    entry = make_entry((1,), block=16)
    assert cf.record({key_id((1,)): entry})
    entry["config"]["kwargs"]["BLOCK"] = 32
    assert cf.record({key_id((1,)): entry})
    assert stored_entries(cf.path)[key_id((1,))]["config"]["kwargs"]["BLOCK"] == 32
    copy = cf.load()[key_id((1,))].to_json()  # a deep copy: changing it changes no entry
    copy["timings_ms"][0] = 5.0
    assert cf.record({key_id((1,)): copy})
    assert stored_entries(cf.path)[key_id((1,))]["timings_ms"][0] == 5.0
    fresh = cache_file(tmp_path).load()[key_id((1,))]
    assert cf.load()[key_id((1,))].timings_ms[0] == 5.0 == fresh.timings_ms[0]


def test_values_equal_in_python_but_not_in_json_are_not_taken_for_one_another(tmp_path):
    """1, 1.0 and true are equal in Python: another writer's true read as the 1 this process knew,
    and written back as 1 (a file's entries must stay as written)."""
    cf = cache_file(tmp_path)
    assert cf.record({key_id((1,)): {**make_entry((1,)), "budget": 1}})
    other = {**make_entry((1,)), "budget": True}
    write_document(cf.path, IDENTITY, {key_id((1,)): other})  # another writer, a hand edit
    assert cf.load()[key_id((1,))].data["budget"] is True
    assert cf.record(entries_for([(2,)]))
    assert stored_entries(cf.path)[key_id((1,))]["budget"] is True
    assert cf.record({key_id((1,)): {**make_entry((1,)), "budget": 1.0}})  # not "unchanged"
    assert type(stored_entries(cf.path)[key_id((1,))]["budget"]) is float


def test_what_a_writer_keeps_is_what_a_reader_gets(tmp_path, warnings):
    cf = cache_file(tmp_path)
    odd = {**make_entry((1,)), "budget": (1, 2), "phases_s": {3: 0.5}}  # JSON has no tuple, no int name
    assert cf.record({key_id((1,)): odd})
    assert cf.load()[key_id((1,))].data["budget"] == [1, 2]
    assert cf.load()[key_id((1,))] == cache_file(tmp_path).load()[key_id((1,))]
    assert not cf.record({key_id((2,)): {**make_entry((2,)), "budget": {1: 0, "a": 1}}})  # unsortable
    # an entry filed under another key's id is refused, as every reader would refuse it
    misfiled = storage.StoredEntry.from_json(key_id((3,)), make_entry((3,)))
    assert not cf.record({key_id((4,)): misfiled})
    assert sorted(cf.load()) == [key_id((1,))] == sorted(stored_entries(cf.path))
    assert sum("not storing" in w for w in warnings()) == 2


def test_a_tool_rewriting_a_file_twice_keeps_the_entries_it_cannot_read(tmp_path):
    """``keep_unreadable`` (prune, merge): an entry this release cannot read (a config field of a newer
    Triton) stays in the file through every rewrite by the same object, not only the first."""
    identity = {**IDENTITY, "triton": "3.99.0"}
    unknown = make_entry((2,))
    unknown["config"]["future_field"] = 1
    path = cache_file(tmp_path, identity).path
    write_document(path, identity, {key_id((2,)): unknown})
    cf = cache_file(tmp_path, identity, keep_unreadable=True)
    for k in (3, 4):
        kid = key_id((k,))
        assert cf.update(
            lambda current, kid=kid, k=k: {
                **current,
                kid: storage.StoredEntry.from_json(kid, make_entry((k,))),
            }
        )
        assert json.loads(path.read_text())["entries"][key_id((2,))] == unknown
    assert sorted(json.loads(path.read_text())["entries"]) == sorted(key_id((k,)) for k in (2, 3, 4))


def test_top_level_members_this_release_does_not_know_are_written_back(tmp_path):
    """A cache file with a member beside schema, identity and entries (an operator's note, a later
    release's field): a record keeps it, as unknown fields inside an entry are kept."""
    cf = cache_file(tmp_path)
    doc = {**storage.new_document(IDENTITY, entries_for([(1,)])), "note": {"by": "ops", "why": ["pinned"]}}
    cf.path.parent.mkdir(parents=True)
    cf.path.write_bytes(storage.dump_document(doc))
    for k in (2, 3):  # the first record reads the file, the second starts from what it wrote
        assert cf.record(entries_for([(k,)]))
        written = json.loads(cf.path.read_text())
        assert written["note"] == {"by": "ops", "why": ["pinned"]}
    assert sorted(written["entries"]) == sorted(key_id((k,)) for k in (1, 2, 3))
    assert cf.path.read_bytes() == storage.dump_document({**written})  # the same bytes as a full dump
