"""Stored files stay readable across releases: a cache file written by release 0.1 restores unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton

from triton_dejavu_like import store as storage
from triton_dejavu_like._compat import CONFIG_FIELDS

DATA = Path(__file__).parent / "data" / "v0_1"


def test_a_cache_file_of_release_0_1_parses_and_writes_back_byte_for_byte():
    raw = (DATA / "cache.json").read_bytes()
    doc = storage.parse_document(raw)
    assert not doc.rejected and len(doc.entries) == 2
    assert storage.dump_document(storage.new_document(doc.identity, doc.entries)) == raw


def test_a_kernel_restores_from_a_cache_file_of_release_0_1_with_no_benchmark(tmp_path):
    raw = (DATA / "cache.json").read_bytes()
    doc = storage.parse_document(raw)
    fields = set(next(iter(doc.entries.values())).data["config"]) - {"kwargs"}
    if doc.identity["triton"] != triton.__version__ or fields != set(CONFIG_FIELDS):
        pytest.skip(f"the file was written with Triton {doc.identity['triton']}, not {triton.__version__}")
    root = tmp_path / "storage"
    target = root / (DATA / "relative_path.txt").read_text().strip()
    target.parent.mkdir(parents=True)
    target.write_bytes(raw)
    env = {**os.environ, "TRITON_DEJAVU_STORAGE": str(root)}
    script = DATA / "kernel_script.py"
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(result["path"]) == target, "the storage path of an unchanged kernel must not move"
    assert result["decisions"] == ["restored", "restored"] and result["benchmarks"] == 0
    assert target.read_bytes() == raw, "restoring rewrites nothing"
