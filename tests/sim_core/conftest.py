"""The example plug-ins of docs/extending.md, imported from their files as a user's package would be."""
import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _load_plugin(path: Path):
    """Import the plug-in file ``path`` once per process under its file's name (as any module: numba's cache finds
    its kernels by that name); registering its kernels is a side effect of the import."""
    module = sys.modules.get(path.stem)
    if module is None:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


@pytest.fixture
def constant_force_plugin():
    """tests/sim_core/plugin_constant_force.py: a force model plug-in."""
    return _load_plugin(HERE / "plugin_constant_force.py")


@pytest.fixture
def law_plugins():
    """tests/sim_core/plugin_laws.py: a motion-law and a joint-law plug-in."""
    return _load_plugin(HERE / "plugin_laws.py")
