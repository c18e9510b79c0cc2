"""Layered stores: TRITON_DEJAVU_STORAGE with several roots, add_store (a folder, a zipped package),
and the CLI naming each file's layer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import triton
from kernels import FakeBench, block_configs, run_add, tuned_add
from serving_helpers import add_key, seed, tree

import triton_dejavu_like as tdl
from triton_dejavu_like import DejavuConfigWarning, DejavuStorageWarning
from triton_dejavu_like.codec import config_id, key_id
from triton_dejavu_like.store.layered import StoreLayer, add_store, forget_stores, registered_stores
from triton_dejavu_like.tools import cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "shipped_kernels"


@pytest.fixture
def roots(tmp_path, monkeypatch):
    paths = [tmp_path / name for name in ("rw", "layer1", "layer2")]
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", os.pathsep.join(map(str, paths)))
    return paths


def test_layers_are_searched_in_order_and_never_written(roots):
    rw, layer1, layer2 = roots
    bench = FakeBench()
    tuner = tuned_add(bench)
    seed(tuner, layer1, {add_key(64): 32})
    seed(tuner, layer2, {add_key(64): 16, add_key(128): 64})
    layers_before = tree(layer1), tree(layer2)

    run_add(tuner, 64)
    assert (tuner.last_decision, tuner.best_config.kwargs["BLOCK"]) == ("restored", 32)  # layer1 first
    run_add(tuner, 128)
    assert (tuner.last_decision, tuner.best_config.kwargs["BLOCK"]) == ("restored", 64)
    assert bench.calls == 0
    store = tuner._state.store
    assert store.where(key_id(add_key(64))) == str(layer1)
    assert store.where(key_id(add_key(128))) == str(layer2)

    run_add(tuner, 256)  # a miss everywhere: tuned and written to the first root only
    assert tuner.last_decision == "tuned"
    assert (tree(layer1), tree(layer2)) == layers_before
    written = json.loads(tuner.cache_path().read_text())
    assert list(written["entries"]) == [key_id(add_key(256))]
    assert tuner.cache_path().is_relative_to(rw)

    again = tuned_add(FakeBench())  # the writable root wins over the layers for its keys
    seed(again, rw, {add_key(128): 16})
    run_add(again, 128)
    assert again.best_config.kwargs["BLOCK"] == 16


def test_an_empty_first_root_writes_the_user_cache_directory_never_the_layer(tmp_path, monkeypatch):
    """``TRITON_DEJAVU_STORAGE="$RW:/shared/base"`` with ``RW`` unset: the layer stays read-only (it
    had become the written root), the user cache directory is written, and a warning says so."""
    layer = tmp_path / "base"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", os.pathsep + str(layer))
    tuner = tuned_add(FakeBench())
    seed(tuner, layer, {add_key(64): 32})
    before = tree(layer)
    with pytest.warns(DejavuConfigWarning, match="first part .* is empty"):
        run_add(tuner, 64)
    assert (tuner.last_decision, tuner.best_config.kwargs["BLOCK"]) == ("restored", 32)
    run_add(tuner, 128)
    assert tuner.last_decision == "tuned"
    assert tree(layer) == before
    assert tuner.cache_path().is_relative_to(tmp_path / "xdg" / "triton_dejavu_like")
    assert key_id(add_key(128)) in json.loads(tuner.cache_path().read_text())["entries"]


def test_cli_list_and_show_name_the_layer(roots, capsys):
    rw, layer1, _ = roots
    tuner = tuned_add(FakeBench())
    seed(tuner, rw, {add_key(64): 32})
    seed(tuner, layer1, {add_key(128): 64})
    roots[2].mkdir()  # empty: a --root part that does not exist is a typo (exit 2)

    assert cli.main(["list", "--root", str(rw), "--root", f"{layer1}{os.pathsep}{roots[2]}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"layer 0 (written): {rw}" and lines[1] == f"layer 1: {layer1}"
    table = [line.split() for line in lines if "add_kernel" in line]
    assert sorted(row[0] for row in table) == ["0", "1"]

    assert cli.main(["list", "--json"]) == 0  # the roots of TRITON_DEJAVU_STORAGE
    files = json.loads(capsys.readouterr().out)["files"]
    assert sorted((f["layer"], f["layer_root"]) for f in files) == [(0, str(rw)), (1, str(layer1))]

    assert cli.main(["show", "add_kernel"]) == 0
    out = capsys.readouterr().out
    assert f"layer 0 (written): {rw}" in out and f"layer 1: {layer1}" in out


def test_add_store_rejects_what_is_not_a_folder(tmp_path):
    with pytest.warns(DejavuStorageWarning, match="not a folder"):
        add_store(tmp_path / "missing")
    with pytest.raises(TypeError):
        add_store(42)
    try:
        add_store(tmp_path)
        add_store(str(tmp_path))  # the same folder once
        assert [layer.label for layer in registered_stores()] == [str(tmp_path)]
    finally:
        forget_stores()


@pytest.mark.parametrize("env_layer", [False, True], ids=["one_root", "with_a_layer"])
def test_a_store_added_after_a_kernel_opened_its_own_is_read_for_the_keys_not_decided(
    tmp_path, monkeypatch, env_layer
):
    """A library registers its shipped store after the kernel's first launch (a warm-up ran first):
    the kernel reads it at its next miss (it was ignored for the life of the process); keys decided
    before keep their answers."""
    rw, layer, shipped = tmp_path / "rw", tmp_path / "layer", tmp_path / "shipped"
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", os.pathsep.join(map(str, [rw, layer][: 1 + env_layer])))
    bench = FakeBench()
    tuner = tuned_add(bench)
    seed(tuner, shipped, {add_key(64): 32, add_key(128): 64})
    seed(tuner, layer, {add_key(128): 16})
    try:
        with tdl.tuning(False):
            run_add(tuner, 100)  # the first miss opens the store, without the shipped one
            assert (tuner.last_decision, tuner.best_config.kwargs["BLOCK"]) == (
                "nearest" if env_layer else "default",
                16,
            )
            add_store(shipped)
            run_add(tuner, 64)
        assert (tuner.last_decision, tuner.best_config.kwargs["BLOCK"]) == ("restored", 32)
        run_add(tuner, 128)  # the environment's layer comes before the registered store
        assert (tuner.last_decision, tuner.best_config.kwargs["BLOCK"]) == (
            "restored",
            16 if env_layer else 64,
        )
        assert tuner._state.store.where(key_id(add_key(64))) == str(shipped)
        assert tuner.cache[add_key(100)].kwargs["BLOCK"] == 16  # decided before: kept
        assert bench.calls == 0
    finally:
        forget_stores()


def test_a_storage_root_that_is_not_a_folder_is_reported_as_add_store_reports_it(roots):
    _, layer1, layer2 = roots  # layer2 is never created (a typo in the variable, an unmounted disk)
    tuner = tuned_add(FakeBench())
    seed(tuner, layer1, {add_key(64): 32})
    with pytest.warns(DejavuStorageWarning, match=f"TRITON_DEJAVU_STORAGE: {layer2} is not a folder"):
        run_add(tuner, 64)
    assert (tuner.last_decision, tuner.best_config.kwargs["BLOCK"]) == ("restored", 32)  # layer1 still used


def test_a_layer_in_a_zip_is_read_without_extracting(tmp_path):
    tuner = tuned_add(FakeBench())
    seed(tuner, tmp_path / "tuned", {add_key(64): 64})
    layer = StoreLayer(zipped(tmp_path / "tuned"))
    identity = tuner.kernel_identity(tuner._platform()).as_dict()
    entries = layer.load(identity, tuner.arg_names)
    assert [e.config.kwargs["BLOCK"] for e in entries.values()] == [64]


def zipped(folder: Path, compression: int = zipfile.ZIP_STORED) -> zipfile.Path:
    """``folder`` moved into a zip file beside it, as a package resource (a zipped wheel's)."""
    archive = folder.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w", compression=compression) as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, path.relative_to(folder.parent))
    shutil.rmtree(folder)
    return zipfile.Path(archive) / folder.name


def damage(location: zipfile.Path, ending: str) -> zipfile.Path:
    """``location`` with the data of its zip's first member whose name ends with ``ending`` damaged
    (a truncated download, a bad disk)."""
    archive = Path(location.root.filename)
    with zipfile.ZipFile(archive) as zf:
        member = next(info for info in zf.infolist() if info.filename.endswith(ending))
    raw = bytearray(archive.read_bytes())
    data = member.header_offset + 30 + len(member.filename.encode()) + len(member.extra)
    raw[data : data + 8] = b"\xff" * 8
    archive.write_bytes(bytes(raw))
    return zipfile.Path(archive) / location.at


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_damaged_zip_layer_is_ignored_with_a_warning(tmp_path, compression):
    """A shipped store whose zip member is damaged (a truncated download, a bad disk) is skipped with
    a storage warning; the lookup must not fail with the zip module's own errors (a stored member
    fails its checksum, a deflated one its decompression)."""
    tuner = tuned_add(FakeBench())
    seed(tuner, tmp_path / "tuned", {add_key(64): 64})
    layer = StoreLayer(damage(zipped(tmp_path / "tuned", compression), "cache.json"))
    identity = tuner.kernel_identity(tuner._platform()).as_dict()
    with pytest.warns(DejavuStorageWarning, match="ignoring the tuning cache in layer"):
        assert layer.load(identity, tuner.arg_names) == {}


# --- warm starts from what the layers hold for other GPUs ------------------------------------------------


def first_measured_block() -> int:
    """The first BLOCK a random search measures for a new key (this seed alone starts elsewhere)."""
    bench = FakeBench()
    run_add(tuned_add(bench, use_random_search=True, search_seed=2, search_max_share=0.5), n=300)
    assert bench.blocks
    return bench.blocks[0]


def block_of(config_ids: list[str]) -> list[int]:
    by_id = {config_id(c): c.kwargs["BLOCK"] for c in block_configs()}
    return [by_id[cid] for cid in config_ids]


@pytest.mark.parametrize("where", ["layer", "add_store", "add_store_zip"])
def test_winners_a_shipped_store_holds_for_another_gpu_seed_a_new_search(tmp_path, monkeypatch, where):
    """A library ships results tuned on another GPU; a user's random search of a new key on their
    GPU measures the shipped winner first, as it does a winner stored under the written root."""
    rw, shipped = tmp_path / "rw", tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", str(rw) + (os.pathsep + str(shipped)) * (where == "layer"))
    assert first_measured_block() != 16
    shutil.rmtree(rw)
    seed(tuned_add(), shipped, {add_key(64): 16, add_key(128): 16}, gpu="NVIDIA_H100")
    try:
        if where != "layer":
            add_store(zipped(shipped) if where == "add_store_zip" else shipped)
        assert first_measured_block() == 16
    finally:
        forget_stores()


def test_winners_stored_with_another_config_list_seed_a_search_when_they_are_candidates(
    tmp_path, monkeypatch
):
    """A ConfigSpace lists other configs on another GPU (num_ctas on Hopper only), and a library may
    pick its list per GPU: the other GPU's winners that are among this list's candidates still seed
    a new key's search; one that is not a candidate here is left out, however often it won."""
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", str(tmp_path))
    assert first_measured_block() != 16
    shutil.rmtree(tmp_path)
    tuner = tuned_add()
    seed(tuner, tmp_path, {add_key(64): 16}, gpu="NVIDIA_H100", kernel_configs="another-list")
    seed(tuner, tmp_path, {add_key(64): 2, add_key(128): 2}, gpu="NVIDIA_H100", kernel_configs="a-third-list")
    assert first_measured_block() == 16
    assert 2 not in [c.kwargs["BLOCK"] for c in block_configs()]


def test_the_warm_start_counts_the_layers_keys_as_serving_reads_them(roots):
    """A key of another GPU stored in several roots counts once, from the first root that holds it;
    the layers' results for this GPU are restored, not taken as another GPU's."""
    rw, layer1, layer2 = roots
    tuner = tuned_add(FakeBench())
    seed(tuner, rw, {add_key(64): 32}, gpu="gpu_a")
    seed(tuner, layer1, {add_key(64): 16, add_key(128): 64}, gpu="gpu_a")  # 64: the written root's
    seed(tuner, layer1, {add_key(64): 128})
    seed(tuner, layer2, {add_key(64): 64}, gpu="gpu_b", tag="nightly")
    run_add(tuner, 64)
    assert (tuner.last_decision, tuner.best_config.kwargs["BLOCK"]) == ("restored", 128)
    assert block_of(tuner._state.store.foreign_winners()) == [64, 32]


def test_unreadable_files_of_a_shipped_store_leave_the_warm_start_to_the_others(tmp_path, recwarn):
    """A shipped zip whose file for one GPU is damaged and whose file for another is no JSON: the
    search tunes, seeded from the file that reads, and says nothing of files of other GPUs."""
    shipped = tmp_path / "shipped"
    tuner = tuned_add()
    damaged = seed(tuner, shipped, {add_key(64): 32}, gpu="gpu_a")
    seed(tuner, shipped, {add_key(64): 16, add_key(128): 16}, gpu="gpu_b")
    garbage = seed(tuner, shipped, {add_key(64): 64}, gpu="gpu_c")
    garbage.write_text("__import__('os').system('touch pwned')")
    try:
        add_store(damage(zipped(shipped), damaged.relative_to(tmp_path).as_posix()))
        assert first_measured_block() == 16
    finally:
        forget_stores()
    assert not [w for w in recwarn if issubclass(w.category, tdl.DejavuWarning)]
    assert not Path("pwned").exists()


# --- the example package that ships its store ---------------------------------------------------------------

USE_PACKAGE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import torch, shipped_kernels
answers = []
for n in (*shipped_kernels.SHIPPED_SIZES, 300):
    x = torch.rand(n)
    torch.testing.assert_close(shipped_kernels.scale(x, 2.0), x * 2.0)
    answers.append(shipped_kernels.scale_kernel.last_decision)
print(json.dumps({"answers": answers, "file": shipped_kernels.__file__}))
"""


def shipped_triton_versions() -> set[str]:
    store = EXAMPLE / "shipped_kernels" / "tuned"
    return {p.name.removeprefix("triton_") for p in store.glob("*/triton_*")}


@pytest.mark.skipif(
    triton.__version__ not in shipped_triton_versions(),
    reason="examples/shipped_kernels/tuned was made with another Triton (run make_store.py)",
)
@pytest.mark.parametrize("form", ["folder", "zip"])
def test_shipped_store_is_used_from_a_folder_and_from_a_zip(tmp_path, form):
    package = tmp_path / "src" / "shipped_kernels"
    shutil.copytree(EXAMPLE / "shipped_kernels", package, ignore=shutil.ignore_patterns("__pycache__"))
    location = package.parent
    if form == "zip":
        location = tmp_path / "shipped_kernels.zip"
        with zipfile.ZipFile(location, "w") as zf:
            for path in sorted(package.rglob("*")):
                zf.write(path, path.relative_to(package.parent))
        shutil.rmtree(package.parent)
    rw = tmp_path / "rw"
    env = {**os.environ, "TRITON_DEJAVU_STORAGE": str(rw), "TRITON_DEJAVU_READ_ONLY": "1"}
    command = [sys.executable, "-c", USE_PACKAGE, str(location)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["answers"] == ["restored", "restored", "nearest"]
    assert result["file"].startswith(str(location))
    assert not rw.exists()
    if form == "zip":
        assert [p.name for p in tmp_path.iterdir()] == ["shipped_kernels.zip"]  # nothing extracted
