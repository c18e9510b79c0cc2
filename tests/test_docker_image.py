"""The GPU test image (``Dockerfile``, docs/docker.md) holds only what its ``COPY`` lines name; its
default command, ``python -m pytest -m gpu -q tests``, must collect the suite from those files."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"


def copies(dockerfile: str) -> list[tuple[list[str], str]]:
    """``(sources, destination)`` of every ``COPY`` line (the build context is the repository)."""
    found = []
    for line in dockerfile.splitlines():
        if not line.upper().startswith("COPY "):
            continue
        words = shlex.split(line, comments=True)
        if words:
            *sources, destination = [w for w in words[1:] if not w.startswith("--")]
            found.append((sources, destination))
    return found


def command(dockerfile: str) -> list[str]:
    """The image's default command (its exec-form ``CMD``)."""
    [line] = [line for line in dockerfile.splitlines() if line.upper().startswith("CMD ")]
    return json.loads(line[4:])


@pytest.mark.slow
@pytest.mark.skipif(not DOCKERFILE.is_file(), reason="not a checkout with the Dockerfile")
def test_the_images_gpu_suite_collects_from_the_copied_files(tmp_path):
    image = tmp_path / "image"
    image.mkdir()
    dockerfile = DOCKERFILE.read_text()
    for sources, destination in copies(dockerfile):
        for source in sources:
            origin = REPO / source
            target = image / destination
            if destination.endswith("/"):
                target = target / origin.name
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target)
    assert (image / "tests").is_dir() and (image / "triton_dejavu_like").is_dir()
    python, *arguments = command(dockerfile)
    assert python == "python" and arguments[:2] == ["-m", "pytest"], "the image no longer runs pytest"
    done = subprocess.run(
        [sys.executable, *arguments, "--collect-only", "-p", "no:cacheprovider"],
        cwd=image,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "error" not in done.stdout.splitlines()[-1]
