"""docs/messages.md documents exactly the schemas of sim/messages.py and the commands of the server, and real
traffic of `mms serve` decodes and validates against those schemas."""
from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest

from sim.messages import SCHEMAS, TOPIC_SIM_STATE, TOPIC_SIM_STATUS, validate
from sim.server_control import COMMANDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "messages.md"
SECTION = re.compile(r"^## `([^`]+)`\s*$", re.MULTILINE)
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$", re.MULTILINE)
UNIT_COLUMNS = ("type", "shape", "frame", "unit", "meaning")
VALIDATE_EVERY = 10             # of the sim/state messages without joint names (validation costs ~0.3 ms each)


def _sections() -> dict[str, str]:
    text = DOC.read_text()
    heads = list(SECTION.finditer(text))
    sections = {}
    for index, head in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else text.find("\n## ", head.end())
        sections[head.group(1)] = text[head.end():end if end > 0 else len(text)]
    return sections


def _documented_rows(section: str) -> dict[str, list[str]]:
    rows = {}
    for match in ROW.finditer(section):
        key = match.group(1)
        assert key not in rows, f"{key} documented twice"
        rows[key] = [cell.strip() for cell in match.group(2).split("|")]
    return rows


def _schema_keys(schema: dict, prefix: str = "") -> dict[str, bool]:
    """Dotted key -> required, for the properties of ``schema`` and of its object-valued properties."""
    keys = {}
    required = set(schema.get("required", []))
    for name, sub in schema.get("properties", {}).items():
        dotted = f"{prefix}{name}"
        keys[dotted] = name in required
        if sub.get("type") == "object" and "properties" in sub:
            keys.update(_schema_keys(sub, dotted + "."))
    return keys


def test_every_topic_has_a_section_and_no_section_is_extra():
    assert set(_sections()) == set(SCHEMAS)


@pytest.mark.parametrize("topic", sorted(SCHEMAS))
def test_docs_list_exactly_the_schema_keys_with_their_required_flag(topic):
    rows = _documented_rows(_sections()[topic])
    keys = _schema_keys(SCHEMAS[topic])
    assert set(rows) == set(keys), (f"in docs only: {sorted(set(rows) - set(keys))}; "
                                    f"in schema only: {sorted(set(keys) - set(rows))}")
    for key, required in keys.items():
        cells = rows[key]
        assert len(cells) == 1 + len(UNIT_COLUMNS), f"{topic} {key}: expected required, {UNIT_COLUMNS}"
        assert cells[0] == ("yes" if required else "no"), f"{topic} {key}: required is {required}"
        assert all(cells), f"{topic} {key}: an empty cell (write - where nothing applies)"


def test_hw_topics_are_marked_as_owned_by_the_driver():
    sections = _sections()
    for topic in SCHEMAS:
        if topic.startswith("hw/"):
            assert "Owned by the driver" in sections[topic], topic


def test_docs_list_exactly_the_control_commands():
    text = DOC.read_text()
    commands_part = text[text.index("## Control commands"):]
    table = commands_part[:commands_part.index("\n\n", commands_part.index("| command |"))]
    documented = [match.group(1) for match in ROW.finditer(table)]
    assert sorted(documented) == sorted(COMMANDS)


def test_real_traffic_decodes_and_validates_against_the_schemas(stream):
    """Every sim/status, every sim/state carrying the joint names and every 10th other sim/state of the 10 s
    run (decoded by sim.messages.decode in the fixture) is validated; all states are checked for shape."""
    counts = {TOPIC_SIM_STATE: 0, TOPIC_SIM_STATUS: 0}
    n = len(stream.joint_names["joint_names"])
    n_passive = stream.joint_names["actuated"].count(False)
    for index, (_, topic, payload) in enumerate(stream.messages + stream.late_messages):
        if topic == TOPIC_SIM_STATE:
            assert [len(payload[key]) for key in ("q", "qd", "qdd", "tau", "strain")] == [n] * 4 + [n_passive]
            if "joint_names" not in payload and index % VALIDATE_EVERY:
                continue
        validate(topic, payload)
        counts[topic] += 1
    assert counts[TOPIC_SIM_STATE] > 1000 and counts[TOPIC_SIM_STATUS] >= 5


def test_the_schemas_reject_what_the_docs_forbid(stream):
    """The validation above could fail: a state without q, or with a 3-vector quaternion, is refused."""
    _, _, state = next(m for m in stream.messages if m[1] == TOPIC_SIM_STATE)
    broken = dict(state)
    del broken["q"]
    with pytest.raises(jsonschema.ValidationError):
        validate(TOPIC_SIM_STATE, broken)
    with pytest.raises(jsonschema.ValidationError):
        validate(TOPIC_SIM_STATE, {**state, "base_quat": [1.0, 0.0, 0.0]})
