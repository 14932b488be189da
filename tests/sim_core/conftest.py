"""The example plug-ins of docs/extending.md, imported from their files as a user's package would be."""
import importlib.util
import sys
from pathlib import Path

import pytest

from sim.plugins import FORCE_KERNELS, JOINT_LAWS, MOTION_LAWS

HERE = Path(__file__).resolve().parent
#: The example plug-in files: a force model; a motion law and a joint law.
PLUGIN_FILES = (HERE / "plugin_constant_force.py", HERE / "plugin_laws.py")
#: pytest's limit on the first test of a module that runs the plug-ins compiled, s (pyproject.toml's 300 s is an
#: ordinary test's): a clean clone (CI) has no cache of the stepper compiled against the plug-ins' registry, and its
#: compile is CPU work a busy machine stretches. Measured: 46.1 s of CPU for a new registry's rk4 stepper (the
#: shipped kernels cached), 869 s of wall time at load 15-20 on this project's 2-core machine; at load 11 the test
#: reached the 300 s
PLUGIN_COMPILE_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def example_plugins() -> dict:
    """{file stem: module} of :data:`PLUGIN_FILES`, each imported under its file's name (as any module: numba's
    cache finds its kernels by that name; registering its kernels is a side effect of the import), for the tests of
    one module; then their kernels leave the registries again.

    Why both files, and why they leave: a registered plug-in changes the registries' fingerprint, against which the
    fused stepper is compiled (sim/fused.py bound_kernels; ~25 s of compile per argument signature on the 2-core CI
    machine). Both modules that test plug-ins register the same two files, so the stepper compiled for the first
    serves the second; and every fused simulation of the later tests of the pytest process runs the shipped
    registries again, whose stepper the warm-up compiled (left registered, each of them would compile anew)."""
    registries = (FORCE_KERNELS, MOTION_LAWS, JOINT_LAWS)
    before = [dict(registry._entries) for registry in registries]
    modules = {}
    try:
        for path in PLUGIN_FILES:
            spec = importlib.util.spec_from_file_location(path.stem, path)
            modules[path.stem] = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(modules[path.stem])
        yield modules
    finally:
        for name in modules:
            del sys.modules[name]
        for registry, entries in zip(registries, before):
            registry._entries = entries


@pytest.fixture(scope="module")
def constant_force_plugin(example_plugins):
    """tests/sim_core/plugin_constant_force.py: a force model plug-in."""
    return example_plugins["plugin_constant_force"]


@pytest.fixture(scope="module")
def law_plugins(example_plugins):
    """tests/sim_core/plugin_laws.py: a motion-law and a joint-law plug-in."""
    return example_plugins["plugin_laws"]
