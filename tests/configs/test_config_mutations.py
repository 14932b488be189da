"""Every key of every shipped robot and rig file, mutated: misspelt, given a wrong type, pushed out of range or
deleted. Each mutation is either refused with a one-line ConfigError naming the file and the key, or (a deleted
optional key) loaded; never a traceback, never a misspelt or out-of-range key accepted silently."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from firmware_interface.rigs.dynamixel import load_dxl_rig
from firmware_interface.rigs.mcu import load_rig
from sim.config import ConfigError, load_toml
from sim.robots import load_robot

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
#: shipped file -> its loader
SHIPPED = {
    "robots/flapper.toml": load_robot,
    "robots/raybot.toml": load_robot,
    "robots/pendulum.toml": load_robot,
    "rigs/flapper_rig.toml": load_rig,
    "rigs/raybot_rig.toml": load_rig,
    "rigs/flapper_dynamixel_rig.toml": load_dxl_rig,
}
#: Files a shipped config names relative to itself (copied next to the mutated copy).
#: (The physics plants' robot files are there too: a rig's robot overrides are checked against their schema.)
COMPANIONS = ("robots/pendulum.urdf", "rigs/flapper_rig.toml", "robots/flapper.toml", "robots/raybot.toml")
EXAMPLES_PER_MUTATION = 60


def _leaves(node, path=()):
    """(path, value) of every key of a document (tables and array items included), depth first."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*path, key), value
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            if isinstance(value, (dict, list)):
                yield from _leaves(value, (*path, index))


def _key_text(path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _parent(doc, path):
    for part in path[:-1]:
        doc = doc[part]
    return doc


ALL_KEYS = [(name, path) for name in SHIPPED for path, _ in _leaves(load_toml(CONFIGS / name))
            if isinstance(path[-1], str)]
NUMERIC_KEYS = [(name, path) for name in SHIPPED for path, value in _leaves(load_toml(CONFIGS / name))
                if isinstance(path[-1], str) and isinstance(value, (int, float)) and not isinstance(value, bool)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("mutations")
    for sub in ("robots", "rigs"):
        (root / sub).mkdir()
    for name in COMPANIONS:
        shutil.copy(CONFIGS / name, root / name)
    return root


def _load_mutated(folder: Path, name: str, doc) -> None:
    target = folder / Path(name).parent / f"mutated_{Path(name).name}"
    target.write_text(tomli_w.dumps(doc))
    SHIPPED[name](target)


def _refused(folder, name, doc, key: str, *other_keys: str) -> str:
    """Load the mutated ``doc`` of ``name``: it must be refused in one line naming the file and ``key`` (or one
    of ``other_keys``); returns the message."""
    with pytest.raises(ConfigError) as caught:
        _load_mutated(folder, name, doc)
    message = str(caught.value)
    assert "\n" not in message, message
    assert f"mutated_{Path(name).name}" in message, message
    assert any(k in message for k in (key, *other_keys)), f"{key}: {message}"
    return message


def _misspell(key: str, how: int) -> str:
    if how == 0:
        return key + key[-1]                                  # a doubled last letter: heartbeat_hzz
    if how == 1:
        return key[:-1] if len(key) > 1 else key + "x"        # a dropped last letter: added_mas
    if how == 2 and len(key) > 2:
        return key[0] + key[2] + key[1] + key[3:]             # two letters swapped
    return key.upper()                                        # wrong case


FUZZ = settings(max_examples=EXAMPLES_PER_MUTATION, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def _copy_of(key):
    """(file name, key path, a fresh copy of the shipped document, the table holding the key)."""
    name, path = key
    doc = load_toml(CONFIGS / name)
    return name, path, doc, _parent(doc, path)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_load(name):
    SHIPPED[name](CONFIGS / name)


@FUZZ
@given(key=st.sampled_from(ALL_KEYS), how=st.integers(0, 3))
def test_misspelt_key_is_refused_by_name(folder, key, how):
    name, path, doc, parent = _copy_of(key)
    wrong = _misspell(path[-1], how)
    assume(wrong not in parent)
    parent[wrong] = parent.pop(path[-1])
    message = _refused(folder, name, doc, _key_text((*path[:-1], wrong)), _key_text(path))
    if _key_text((*path[:-1], wrong)) in message:
        assert "unknown key" in message or "no moving joint" in message, message


#: A value of another TOML type for each type found in a config.
WRONG_TYPE = {str: [12345, True], bool: ["yes", 1], int: ["many", [1]], float: ["fast", True],
              list: ["list", 3.0], dict: [7, "table"]}


@FUZZ
@given(key=st.sampled_from(ALL_KEYS), pick=st.integers(0, 1))
def test_wrong_type_is_refused_by_name(folder, key, pick):
    name, path, doc, parent = _copy_of(key)
    parent[path[-1]] = WRONG_TYPE[type(parent[path[-1]])][pick]
    _refused(folder, name, doc, _key_text(path))


@FUZZ
@given(key=st.sampled_from(NUMERIC_KEYS), high=st.booleans())
def test_out_of_range_is_refused_by_name(folder, key, high):
    name, path, doc, parent = _copy_of(key)
    if isinstance(parent[path[-1]], int):
        parent[path[-1]] = 2**63 - 1 if high else -2**63
    else:
        parent[path[-1]] = 1e300 if high else -1e300
    _refused(folder, name, doc, _key_text(path))


@FUZZ
@given(key=st.sampled_from(ALL_KEYS))
def test_deleted_key_is_refused_by_name_or_defaulted(folder, key):
    name, path, doc, parent = _copy_of(key)
    del parent[path[-1]]
    try:
        _load_mutated(folder, name, doc)
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message, message
        # a deleted table or channel may be what another key refers to: the refusal names one of them
        assert _key_text(path) in message or "missing" not in message, message
