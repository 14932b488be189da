"""Check that the version floors pyproject.toml claims are real: install exactly those versions and run tests.

    python tools/check_floors.py [--python PYTHON] [--keep DIR]

The floors (``name>=X`` of ``[project] dependencies`` and of the ``test`` extra, and ``requires-python``) are
what a user may have installed. This tool creates a throwaway virtual environment with ``PYTHON`` (by default
the interpreter running it; it must be the ``requires-python`` floor's minor version, or the tool says the
Python floor went unchecked), installs ``name==X`` for every floor with pip from the package registry, copies
the tracked tree (``git archive HEAD``: what a clone has, not the work tree's caches) and runs a subset of the
suite that touches every runtime dependency (:data:`SUBSET`), after ``python -m sim.warmup`` as the Makefile
runs it. Exit 0 when everything installs and passes.

It installs about 830 MB (numpy, scipy, numba, PyQt5, ...) and compiles the kernels it tests: a developer's
check after changing a floor, not a CI step. The independent references of the test extra (Pinocchio,
dynamixel-sdk: :data:`NOT_INSTALLED`) are left out, with the tests that need them.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Test-extra references whose tests are not in SUBSET (Pinocchio alone is ~380 MB).
NOT_INSTALLED = {"pin", "dynamixel-sdk"}

#: Packages that are compiled against NumPy or Qt: installed from wheels only, so that a floor without a wheel
#: for the floor Python fails here instead of starting a source build of NumPy.
WHEELS_ONLY = ("numpy", "scipy", "numba", "llvmlite", "h5py", "matplotlib", "contourpy", "kiwisolver", "pillow",
               "pyqt5", "pyqt5-qt5", "pyqt5-sip", "pyzmq")

#: Tests that exercise every runtime dependency at its floor (the reason each is in the list). Together they
#: take a few minutes, most of it numba compiling the kernels.
SUBSET = (
    "tests/sim_core/test_sim_core_spatial.py",        # numpy, scipy.linalg, numba kernels
    "tests/sim_core/test_sim_core_laws.py",           # scipy.interpolate splines
    "tests/sim_core/test_sim_core_conservation.py",   # the hybrid algorithm's kernels, RK4
    "tests/raybot/test_raybot_hydro.py",              # scipy.special.ellipe, hydro kernels
    "tests/flapper/test_flapper_summary.py",          # np.trapezoid (harmonic fit)
    "tests/configs/test_config_cases.py",             # tomllib, jsonschema validators
    "tests/network/test_network_config.py",           # tomllib, tomli-w
    "tests/network/test_curve_auth.py",               # pyzmq CURVE, msgpack
    "tests/hil_record/test_recorder_mcap.py",         # mcap writer and reader, pyzmq
    "tests/hil_record/test_export_roundtrip.py",      # h5py, scipy.io, csv
    "tests/hil_record/test_validate_known.py",        # matplotlib figures, report
    "tests/firmware_interface/test_fi_protocol.py",   # cobs, crc, hypothesis
    "tests/firmware_interface/test_fi_device.py",     # pyserial on a pseudo-terminal
    "tests/gui/test_dash_buffers.py",                 # gui data path
    "tests/gui/test_dash_replay.py",                  # PyQt5, pyqtgraph, pytest-qt
    "tests/gui/test_view3d_gl.py",                    # PyOpenGL: the 3-D view drawn on Mesa's surfaceless EGL
)

#: ``name>=version`` or ``name==version`` (a pinned tool: its pin is its floor). Extras and markers are not used
#: in this project's requirements.
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:>=|==)\s*([0-9][0-9A-Za-z.]*)\s*$")


def read_floors(pyproject: Path = ROOT / "pyproject.toml") -> tuple[str, dict[str, str], dict[str, str]]:
    """(Python floor "3.X", runtime floors {name: version}, test-extra floors {name: version}) of a pyproject.
    Raises ValueError naming a requirement that is not a plain ``name>=version`` or ``name==version``."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    python = project["requires-python"].strip()
    if not python.startswith(">="):
        raise ValueError(f"{pyproject}: requires-python must be '>=X.Y', got {python!r}")

    def floors(requirements: list[str]) -> dict[str, str]:
        out = {}
        for requirement in requirements:
            match = REQUIREMENT.match(requirement)
            if match is None:
                raise ValueError(f"{pyproject}: requirement {requirement!r} is not 'name>=version' or 'name==version'")
            out[match.group(1)] = match.group(2)
        return out

    return python[2:].strip(), floors(project["dependencies"]), floors(project["optional-dependencies"]["test"])


def run(command: list[str], **kwargs) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)


def export_tree(destination: Path) -> None:
    """The tracked files of HEAD into destination (what a clone holds)."""
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(destination)], input=archive, check=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/check_floors.py", description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter of the venv (default: this one)")
    parser.add_argument("--keep", type=Path, help="build the venv and tree in this directory and keep them")
    args = parser.parse_args(argv)

    python_floor, runtime, test = read_floors()
    version = subprocess.run([args.python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    pins = [f"{name}=={floor}" for name, floor in {**runtime, **test}.items() if name not in NOT_INSTALLED]

    work = args.keep or Path(tempfile.mkdtemp(prefix="mms-floors-"))
    work.mkdir(parents=True, exist_ok=True)
    venv, tree = work / "venv", work / "tree"
    started = time.monotonic()
    run([args.python, "-m", "venv", "--clear", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    run([*pip, "install", "--quiet", "--upgrade", "pip"])
    run([*pip, "install", "--quiet", "--only-binary", ",".join(WHEELS_ONLY), *pins])
    installed = subprocess.run([*pip, "freeze"], check=True, capture_output=True, text=True).stdout
    if tree.exists():
        subprocess.run(["rm", "-rf", str(tree)], check=True)
    tree.mkdir()
    export_tree(tree)
    # The project itself without dependencies (its floors are installed above): tests start the `mms` script.
    run([*pip, "install", "--quiet", "--no-deps", "-e", "."], cwd=tree)
    env = dict(os.environ, PYTHONPATH=str(tree), QT_QPA_PLATFORM="offscreen")
    # As `make` does: the kernels are compiled once before the tests, not inside a test's timeout (a cold compile
    # took the first kernel test past its 300 s on a loaded machine).
    run([str(venv / "bin" / "python"), "-m", "sim.warmup"], cwd=tree, env=env)
    tests = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                            *SUBSET], cwd=tree, env=env)
    minutes = (time.monotonic() - started) / 60.0

    print("\ninstalled:\n" + installed)
    print(f"floors: Python {python_floor} (venv: {version}); " + ", ".join(pins))
    if version != python_floor:
        print(f"the Python floor {python_floor} went unchecked: the venv runs {version} (use --python)")
    print(f"{len(SUBSET)} test files at the floors: {'PASSED' if tests.returncode == 0 else 'FAILED'} "
          f"({minutes:.1f} min including downloads and compiles)")
    return 0 if tests.returncode == 0 and version == python_floor else 1


if __name__ == "__main__":
    sys.exit(main())
