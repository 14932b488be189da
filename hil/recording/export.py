"""``mms export``: a recording as named time series per topic for MATLAB (.mat), HDF5 and spreadsheets (CSV).

Each topic is one table (:func:`export_table`, from the columns of :mod:`hil.recording.series`):

- **one time base**, ``time_s`` (float64 s since the recording's origin, the earliest publisher ``stamp_ns``): the
  message's publisher stamp, or for ``hw/telemetry`` each sample's own time (its frame's ``host_ns`` moved back
  by the device clock). The raw integer clocks (``log_time_ns``, ``stamp_ns``, ``sample_ns``, ``host_ns``,
  ``device_us``, ...) are kept apart, exact, as int64 (*raw clocks*), so that every column of a table is a double
  and MATLAB mixes them freely.
- **units in the names**: every column with a unit ends with it (``q_stroke_r_rad``, ``tau_stroke_r_N_m``,
  ``base_wrench_fz_N``, ``servo_angle_stroke_right_rad``, ``gauge_strain_root_bend_r_m_per_m``); the units are
  also given as text (a ``units`` struct in ``.mat``, a ``unit`` attribute in HDF5). Counters and flags have
  none.
- **distinct quantities, distinct names**: the simulator's ``strain`` (a passive joint's deflection, rad) is
  ``joint_deflection_<joint>_rad``; a gauge's reading (surface strain, m/m) is ``gauge_strain_<channel>_<unit>``.
- **one sign convention to compare**: ``base_wrench_*`` is the wrench the support exerts on the base; ``load_*``
  is what the load cell reads, in its own sign (the flapper rig's reads what the thorax pushes: the opposite).
  Each measured channel the rig maps to a simulated signal (:func:`firmware_interface.rigs.host.channel_maps`, as validation and the
  dashboard use them) is given once more in that signal's unit and sign: ``load_fz_as_base_wrench_fz_N``.

Layouts:

- ``mat``: one file ``RUN.mat``; one struct per topic (``sim/state`` -> ``sim_state``), one field per column, and
  ``units`` (field -> unit), ``column_names``, ``time_base`` (what ``time_s`` is) and ``raw_clocks`` (int64
  fields); a ``metadata`` struct with the recording's metadata records (robot / rig config text, versions).
- ``h5``: one file ``RUN.h5``; one group per topic (``/sim/state``), one dataset per column with its ``unit``
  attribute, the column order in the group attribute ``columns``, ``time_base`` as an attribute, the raw clocks
  in the subgroup ``raw_clocks``; metadata records as groups of string attributes under ``/metadata``.
- ``foxglove``: one file ``RUN.foxglove.mcap``: the recording's own topics and metadata copied as they are, plus
  the robot's poses and shapes as Foxglove's well-known messages (hil/foxglove/scene.py, docs/foxglove.md), so that
  Foxglove's 3-D panel draws the robot from a recording made without them. The robot is the recording's own robot
  config, or ``--robot``.
- ``csv``: per topic ``<topic with / as _>.csv`` (a header row of the names above) and
  ``<topic>_raw_clocks.csv`` (``time_s`` and the raw clocks, to join on); floats written with ``repr`` (they read
  back exactly).
"""
from __future__ import annotations

import csv
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hil.recording.mcap_io import RawRecording, RecordingError, read_recording
from hil.recording.series import FIXED_NAMES, Table, build_tables, decode_payload, simulated_unit
from sim.config import ConfigError
from sim.messages import TOPIC_HW_COMMAND, TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE, TOPIC_SIM_STATUS

FOXGLOVE_SUFFIX = ".foxglove.mcap"
_MATLAB_NAME_MAX = 63
#: the unit written for a column that has none (counters, flags, a quaternion): MATLAB reads "" as []
NO_UNIT = "-"


#: hil.recording.series columns that are raw clocks (int64), and their names in an export
RAW_CLOCKS = {"log_time": "log_time_ns", "stamp_ns": "stamp_ns", "sample_ns": "sample_ns", "host_ns": "host_ns",
              "device_us": "device_us", "state_stamp_ns": "state_stamp_ns", "servo_host_ns": "servo_host_ns"}
#: what ``time_s`` is, per topic
TIME_BASES = {
    TOPIC_HW_TELEMETRY: "time_s: s since the recording's origin (the earliest publisher stamp_ns), each sample's own "
                        "time: its frame's host_ns moved back by the device clock (device_us)",
}
DEFAULT_TIME_BASE = "time_s: s since the recording's origin (the earliest publisher stamp_ns), the message's stamp_ns"
#: topics whose payload ``t`` is the simulation time (a signal, exported as sim_time_s; elsewhere it is NaN)
SIM_TIME_TOPICS = (TOPIC_SIM_STATE, TOPIC_SIM_STATUS, TOPIC_HW_COMMAND)
#: (topic, payload key) -> (quantity name in the export, unit; None: per element or from the rig file)
QUANTITIES: dict[tuple[str, str], tuple[str, str | None]] = {
    (TOPIC_SIM_STATE, "q"): ("q", "rad"), (TOPIC_SIM_STATE, "qd"): ("qd", "rad/s"),
    (TOPIC_SIM_STATE, "qdd"): ("qdd", "rad/s^2"), (TOPIC_SIM_STATE, "tau"): ("tau", "N m"),
    (TOPIC_SIM_STATE, "strain"): ("joint_deflection", "rad"), (TOPIC_SIM_STATE, "base_pos"): ("base_pos", "m"),
    (TOPIC_SIM_STATE, "base_quat"): ("base_quat", ""), (TOPIC_SIM_STATE, "base_twist"): ("base_twist", None),
    (TOPIC_SIM_STATE, "base_wrench"): ("base_wrench", None), (TOPIC_SIM_STATE, "ext_wrench"): ("ext_wrench", None),
    (TOPIC_HW_COMMAND, "setpoint_rad"): ("setpoint", "rad"), (TOPIC_HW_COMMAND, "setpoint_raw"): ("setpoint_raw", None),
    (TOPIC_HW_TELEMETRY, "servo_rad"): ("servo_angle", "rad"), (TOPIC_HW_TELEMETRY, "strain"): ("gauge_strain", None),
    (TOPIC_HW_TELEMETRY, "load"): ("load", None),
}
#: a key segment ending so names its unit (``step_us.p99``, ``state_rate_hz``, ``latency_us.tick_late.max``)
_UNIT_ENDINGS = {"_us": "us", "_ns": "ns", "_hz": "Hz", "_s": "s"}
#: last key segments that count things (samples, overruns) under a key that names a unit
_COUNT_LEAVES = ("n", "overruns")


@dataclass
class Column:
    """One exported column: ``values (rows,)``, float64 in a table, int64 among the raw clocks."""
    name: str      # with its unit as suffix
    unit: str      # "" for counters and flags
    values: np.ndarray


@dataclass
class ExportTable:
    topic: str
    time_base: str
    columns: list[Column]            # time_s first
    raw_clocks: list[Column]         # exact int64 clocks (ns, or us for device_us)
    text: dict[str, list[str]] = field(default_factory=dict)


def unit_suffix(unit: str) -> str:
    """A unit as a name suffix: ``N m`` -> ``N_m``, ``m/m`` -> ``m_per_m``, ``rad/s^2`` -> ``rad_per_s2``."""
    return unit.replace(" ", "_").replace("/", "_per_").replace("^", "")


def _named(quantity: str, element: str | None, unit: str) -> str:
    parts = [quantity] + ([element] if element is not None else []) + ([unit_suffix(unit)] if unit else [])
    return "_".join(parts)


def _element_unit(topic: str, key: str, element: str, rig_units: dict[tuple[str, str], str]) -> str:
    if key == "base_twist":
        return "m/s" if element.startswith("v") else "rad/s"
    if key in ("base_wrench", "ext_wrench"):
        return simulated_unit(key, element)
    return rig_units.get((key, element), "")


def _generic(name: str) -> tuple[str, str]:
    """A column without a known quantity: its unit from a key segment that names one, moved to the end (a count
    under such a key, ``latency_us.tick_late.n``, has none)."""
    segments = name.split(".")
    if len(segments) > 1 and segments[-1] in _COUNT_LEAVES:
        return "_".join(segments), ""
    for index, segment in enumerate(segments):
        for ending, unit in _UNIT_ENDINGS.items():
            if segment.endswith(ending) and len(segment) > len(ending):
                segments[index] = segment[:-len(ending)]
                return _named("_".join(segments), None, unit), unit
    return name.replace(".", "_"), ""


def export_table(table: Table, rig=None) -> ExportTable:
    """A :class:`hil.recording.series.Table` as exported (module docstring); ``rig``: the host view of the run's rig file
    (:func:`firmware_interface.rigs.host.stored_rig`), for the units of sensor channels and the maps to the simulated signals."""
    from firmware_interface.rigs.host import channel_maps, sensor_unit

    rig_units: dict[tuple[str, str], str] = {}
    if rig is not None:
        rig_units.update({("strain" if c.kind == "strain" else "load", c.name): sensor_unit(c) for c in rig.sensors})
        rig_units.update({("setpoint_raw", s.name): s.unit for s in rig.servos})
    topic = table.topic
    out = ExportTable(topic, TIME_BASES.get(topic, DEFAULT_TIME_BASE),
                      [Column("time_s", "s", np.asarray(table.columns["time_s"], dtype=float))], [],
                      dict(table.text))
    grouped = {column: key for key, columns in table.groups.items() for column in columns}
    for name, values in table.columns.items():
        if name == "time_s":
            continue
        if name in RAW_CLOCKS:
            out.raw_clocks.append(Column(RAW_CLOCKS[name], "us" if name.endswith("_us") else "ns",
                                         np.asarray(values, dtype=np.int64)))
            continue
        if name == "t":
            if topic in SIM_TIME_TOPICS and not np.isnan(values).all():
                out.columns.append(Column("sim_time_s", "s", np.asarray(values, dtype=float)))
            continue
        key = grouped.get(name)
        quantity = QUANTITIES.get((topic, key)) if key is not None else None
        if quantity is None:
            export_name, unit = _generic(name)
        else:
            element = table.element_names.get(key, FIXED_NAMES.get(key, []))[table.groups[key].index(name)] \
                if len(table.groups[key]) > 1 or key in table.element_names else None
            unit = quantity[1] if quantity[1] is not None else _element_unit(topic, key, element or "", rig_units)
            export_name = _named(quantity[0], element, unit)
        out.columns.append(Column(export_name, unit, np.asarray(values, dtype=float)))
    if topic == TOPIC_HW_TELEMETRY and rig is not None:
        out.columns += _mapped_columns(table, channel_maps(rig))
    return out


def _mapped_columns(table: Table, maps) -> list[Column]:
    """The telemetry channels a rig maps to simulated signals, in those signals' unit and sign."""
    quantity = {key: name for (topic, key), (name, _unit) in QUANTITIES.items() if topic == TOPIC_HW_TELEMETRY}
    columns = []
    for mapping in maps:
        names = table.element_names.get(mapping.telemetry_key, [])
        if mapping.channel not in names:
            continue
        simulated = QUANTITIES.get((TOPIC_SIM_STATE, mapping.signal), (mapping.signal, None))[0]
        element = mapping.element if isinstance(mapping.element, str) else FIXED_NAMES["base_wrench"][mapping.element]
        unit = simulated_unit(mapping.signal, mapping.element)
        values = mapping.to_simulated(np.asarray(table.element(mapping.telemetry_key, mapping.channel), dtype=float))
        columns.append(Column(_named(f"{quantity[mapping.telemetry_key]}_{mapping.channel}_as_{simulated}", element,
                                     unit), unit, values))
    return columns


def matlab_name(name: str, taken: set[str]) -> str:
    """A valid, unique MATLAB identifier for ``name`` (letters, digits, underscores, starting with a letter)."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not base or not base[0].isalpha():
        base = "x" + base
    base = base[:_MATLAB_NAME_MAX]
    candidate, k = base, 1
    while candidate in taken:
        suffix = f"_{k}"
        candidate = base[:_MATLAB_NAME_MAX - len(suffix)] + suffix
        k += 1
    taken.add(candidate)
    return candidate


def topic_file_stem(topic: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", topic)


def _write_csv(path: Path, names: list[str], columns: list[list]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(names)
        writer.writerows(zip(*columns))
    return path


def export_csv(tables: list[ExportTable], out: Path) -> list[Path]:
    written = []
    for table in tables:
        stem = topic_file_stem(table.topic)
        written.append(_write_csv(out / f"{stem}.csv", [c.name for c in table.columns] + list(table.text),
                                  [c.values.tolist() for c in table.columns] + list(table.text.values())))
        time = table.columns[0]
        written.append(_write_csv(out / f"{stem}_raw_clocks.csv", [time.name] + [c.name for c in table.raw_clocks],
                                  [time.values.tolist()] + [c.values.tolist() for c in table.raw_clocks]))
    return written


def export_mat(tables: list[ExportTable], metadata: dict[str, dict[str, str]], path: Path) -> Path:
    from scipy.io import savemat

    variables: dict[str, object] = {}
    top_names: set[str] = {"metadata"}
    for table in tables:
        fields: dict[str, object] = {}
        taken = {"column_names", "units", "time_base", "raw_clocks"}
        names, units = [], {}
        for column in table.columns:
            field_name = matlab_name(column.name, taken)
            fields[field_name] = column.values
            units[field_name] = column.unit or NO_UNIT
            names.append(column.name)
        for column, values in table.text.items():
            fields[matlab_name(column, taken)] = np.array(values, dtype=object)
            names.append(column)
        fields["column_names"] = np.array(names, dtype=object)
        fields["units"] = units
        fields["time_base"] = table.time_base
        clock_names: set[str] = set()
        fields["raw_clocks"] = {matlab_name(c.name, clock_names): c.values for c in table.raw_clocks}
        variables[matlab_name(table.topic, top_names)] = fields
    taken_meta: set[str] = set()
    variables["metadata"] = {matlab_name(name, taken_meta): {matlab_name(k, set()): v for k, v in record.items()}
                             for name, record in metadata.items()}
    savemat(path, variables, long_field_names=True, do_compression=True, oned_as="column")
    return path


def export_h5(tables: list[ExportTable], metadata: dict[str, dict[str, str]], path: Path) -> Path:
    import h5py

    string = h5py.string_dtype()
    with h5py.File(path, "w") as handle:
        for table in tables:
            group = handle.require_group(table.topic)
            for column in table.columns:
                dataset = group.create_dataset(column.name, data=column.values, compression="gzip", shuffle=True)
                dataset.attrs["unit"] = column.unit or NO_UNIT
            for column, values in table.text.items():
                group.create_dataset(column, data=np.array(values, dtype=object), dtype=string)
            clocks = group.require_group("raw_clocks")
            for column in table.raw_clocks:
                clocks.create_dataset(column.name, data=column.values, compression="gzip", shuffle=True)
                clocks[column.name].attrs["unit"] = column.unit
            group.attrs["columns"] = [c.name for c in table.columns] + list(table.text)
            group.attrs["topic"] = table.topic
            group.attrs["time_base"] = table.time_base
        meta = handle.require_group("metadata")
        for name, record in metadata.items():
            entry = meta.require_group(name)
            for key, value in record.items():
                entry.attrs[key] = value
    return path


#: exit status of ``mms export`` when the recording is damaged and messages were lost (the export is written)
EXIT_DATA_LOST = 3


@dataclass
class ExportResult:
    written: list[Path]
    recording: RawRecording
    rows: dict[str, int]        #: rows written per topic
    messages: dict[str, int]    #: messages read per topic


def export_foxglove(recording: RawRecording, path: Path, robot: Path | None, poses_rate_hz: float) -> Path:
    """The recording with Foxglove's poses and shapes (module docstring); RecordingError when the robot is unknown,
    does not build, or every state is refused (the first line of the reason: an unknown schema version ...)."""
    from hil.foxglove.scene import pose_stream, schema
    from hil.recording.mcap_io import MESSAGE_ENCODING, RecordingWriter, stored_robot_config
    from sim.config import load_toml

    try:
        config, config_path = (load_toml(robot), robot) if robot else stored_robot_config(recording.metadata,
                                                                                           "robot_config")
        stream = pose_stream(config, config_path, poses_rate_hz)
    except ConfigError as exc:
        raise RecordingError(f"{recording.path}: no poses: {str(exc).splitlines()[0]}") from None
    topics = [t for t, encoding in recording.encodings.items() if encoding == MESSAGE_ENCODING]
    merged = sorted(((message[0], topic, message) for topic in topics for message in recording.messages[topic]),
                    key=lambda item: item[0])
    writer = RecordingWriter(path, overwrite=True)
    try:
        for name, record in recording.metadata.items():
            writer.add_metadata(name, record)
        for log_time, topic, (_log, publish_time, data) in merged:
            payload = decode_payload(data)      # None for a malformed payload: copied, and refused as a state
            seq = payload.get("seq") if payload is not None else 0
            writer.add(topic, bytes(data), log_time, publish_time, seq if isinstance(seq, int) and seq >= 0 else 0)
            if topic == TOPIC_SIM_STATE and stream.due(publish_time):
                for message in stream.messages(payload):
                    writer.add_json(message.topic, message.schema_name, schema(message.schema_name), message.data,
                                    log_time, message.stamp_ns)
    finally:
        writer.close()
    if stream.posed == 0:
        path.unlink()
        reason = stream.last_refusal or "it holds no sim/state"
        raise RecordingError(f"{recording.path}: no poses: {reason}")
    return path


def export(run: Path, fmt: str, out: Path, topics: list[str] | None = None, progress: bool = True,
           robot: Path | None = None, poses_rate_hz: float = 0.0) -> ExportResult:
    recording = read_recording(run, topics=set(topics) if topics else None, progress=progress)
    if fmt == "foxglove":
        out.mkdir(parents=True, exist_ok=True)
        written = [export_foxglove(recording, out / (run.stem + FOXGLOVE_SUFFIX), robot, poses_rate_hz)]
        return ExportResult(written, recording, {}, {t: len(m) for t, m in recording.messages.items()})
    series = build_tables(recording, topics=topics, progress=progress).tables
    if not series:
        raise RecordingError(f"{run}: no messages" + (f" on {topics}" if topics else ""))
    rig = stored_rig_or_none(recording.metadata)
    tables = [export_table(table, rig) for table in series.values()]
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        written = export_csv(tables, out)
    elif fmt == "mat":
        written = [export_mat(tables, recording.metadata, out / f"{run.stem}.mat")]
    else:
        written = [export_h5(tables, recording.metadata, out / f"{run.stem}.h5")]
    return ExportResult(written, recording, {topic: table.rows for topic, table in series.items()},
                        {topic: len(recording.messages[topic]) for topic in series})


def stored_rig_or_none(metadata: dict[str, dict[str, str]]):
    """The run's rig (for sensor units and maps), or None when the recording holds none that loads."""
    from firmware_interface.rigs.host import stored_rig

    try:
        return stored_rig(metadata)
    except ConfigError:
        return None


def damage_report(result: ExportResult) -> list[str]:
    """The lines ``mms export`` prints on stderr for a damaged recording: every damage entry, then per topic
    the rows written and the messages read against those the file held."""
    lines = [f"damage at byte {entry['offset']}: {entry['kind']}, "
             f"{'unknown number of' if entry['messages_lost'] is None else entry['messages_lost']} messages lost: "
             f"{entry['detail']}" for entry in result.recording.damage]
    for topic, rows in result.rows.items():
        read, expected = result.messages[topic], result.recording.expected_messages.get(topic)
        held = "an unknown number" if expected is None else str(expected)
        lines.append(f"{topic}: {rows} rows written from {read} messages of {held} in the file")
    return lines


def run(args) -> int:
    run_path = Path(args.run)
    out = Path(args.out) if args.out else run_path.with_suffix(".export")
    try:
        result = export(run_path, args.to, out, args.topics, progress=not args.quiet, robot=args.robot,
                        poses_rate_hz=args.poses_rate)
    except RecordingError as exc:
        print(f"mms export: error: {exc}", file=sys.stderr)
        return 2
    for path in result.written:
        print(f"wrote {path}")
    if not result.recording.damage:
        return 0
    for line in damage_report(result):
        print(f"mms export: {line}", file=sys.stderr)
    if result.recording.messages_lost:
        print(f"mms export: {run_path} is damaged and messages were lost: exit status {EXIT_DATA_LOST}",
              file=sys.stderr)
        return EXIT_DATA_LOST
    return 0
