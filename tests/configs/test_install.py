"""A non-editable ``pip install .`` runs from any folder: the shipped configs are package data, found by name.

The venv sees the test interpreter's packages (``--system-site-packages`` and a .pth naming this interpreter's
site-packages, which is itself a venv's), so nothing is downloaded; the project is built from a copy of the
tree, so nothing in the tree itself can be found through the source folders.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: what the copy leaves out: not part of the distribution, and large
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "runs", "tests", "benchmarks", "docs", "__pycache__", "build",
                                    "*.egg-info")
PIP_TIMEOUT_S = 300
RUN_TIMEOUT_S = 120


def _installed(tmp_path: Path) -> Path:
    """A venv with a copy of the project installed non-editable; returns its bin folder."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=NOT_COPIED)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=PIP_TIMEOUT_S)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "test-interpreter.pth").write_text(sysconfig.get_path("purelib") + "\n")
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                              "--no-index", str(source)], capture_output=True, text=True, env=_clean_env(),
                             timeout=PIP_TIMEOUT_S)
    assert install.returncode == 0, install.stdout + install.stderr
    shutil.rmtree(source)        # nothing may be found through the tree that was installed
    return venv / "bin"


def _clean_env() -> dict[str, str]:
    """The environment without the worktree on PYTHONPATH (which would shadow the installed package)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def test_an_installed_mms_runs_the_shipped_robots_from_any_folder(tmp_path):
    bin_dir = _installed(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _clean_env()
    version = subprocess.run([str(bin_dir / "mms"), "--version"], cwd=elsewhere, capture_output=True, text=True,
                             env=env, timeout=RUN_TIMEOUT_S)
    assert version.returncode == 0 and version.stdout.split() == ["mms", "0.1.0"], version.stdout + version.stderr
    where = subprocess.run([str(bin_dir / "python"), "-c", "import sim, configs; print(sim.__file__, configs.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S)
    assert all(str(tmp_path / "venv") in path for path in where.stdout.split()), where.stdout + where.stderr
    # Foxglove's schemas are package data too (recordings and the bridge register them)
    fox = subprocess.run([str(bin_dir / "python"), "-c", "from hil.foxglove.scene import schema; "
                          "print(schema('foxglove.SceneUpdate')['title'])"], cwd=elsewhere, capture_output=True,
                         text=True, env=env, timeout=RUN_TIMEOUT_S)
    assert fox.stdout.split() == ["foxglove.SceneUpdate"], fox.stdout + fox.stderr
    # the demo's set-ups are the installed rigs and robots (a full demo run is tests/hil_demo's)
    demo = subprocess.run([str(bin_dir / "mms"), "demo", "--help"], cwd=elsewhere, capture_output=True, text=True,
                          env=env, timeout=RUN_TIMEOUT_S)
    assert demo.returncode == 0 and "flapper, flapper-dynamixel, raybot" in " ".join(demo.stdout.split()), demo.stderr
    # the interpreted path (numba's JIT off): compiling the kernels for a new install folder takes about 70 s,
    # and the same Python code runs either way
    env["NUMBA_DISABLE_JIT"] = "1"
    for robot, duration in (("flapper", "0.002"), ("pendulum", "0.05")):
        run = subprocess.run([str(bin_dir / "mms"), "sim", robot, "--duration", duration, "--no-plots", "--quiet",
                              "--out", robot], cwd=elsewhere, capture_output=True, text=True, env=env,
                             timeout=RUN_TIMEOUT_S)
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"simulated {duration} s" in run.stdout
        metadata = json.loads((elsewhere / robot / "metadata.json").read_text())
        assert str(tmp_path / "venv") in json.dumps(metadata), "the shipped robot file was not the installed one"
