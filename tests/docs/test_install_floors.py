"""pyproject.toml's requirements stay in the form tools/check_floors.py reads, each with the reason for its floor."""
from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_tool():
    spec = importlib.util.spec_from_file_location("check_floors", ROOT / "tools" / "check_floors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_requirement_has_a_floor_the_checker_reads():
    python, runtime, test = load_tool().read_floors()
    assert python == "3.11"
    assert runtime["numpy"].startswith("2.")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert len(runtime) == len(project["dependencies"])
    assert len(test) == len(project["optional-dependencies"]["test"])


def test_every_runtime_floor_names_its_reason():
    text = (ROOT / "pyproject.toml").read_text()
    block = text[text.index("dependencies = ["):text.index("]", text.index("dependencies = ["))]
    lines = [line for line in block.splitlines()[1:] if line.strip().startswith('"')]
    bare = [line.strip() for line in lines if "#" not in line]
    assert lines and not bare, f"requirements without a comment naming the feature that sets the floor: {bare}"


def test_the_linter_targets_the_python_floor():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    python, _, _ = load_tool().read_floors()
    assert config["tool"]["ruff"]["target-version"] == "py" + python.replace(".", "")


def test_the_checker_refuses_a_requirement_without_a_floor(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nrequires-python = ">=3.11"\ndependencies = ["numpy"]\n'
                         '[project.optional-dependencies]\ntest = []\n')
    with pytest.raises(ValueError, match="'numpy' is not 'name>=version'"):
        load_tool().read_floors(pyproject)
