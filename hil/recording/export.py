"""``mms export``: a recording as named time series per topic for MATLAB (.mat), HDF5 and spreadsheets (CSV).

Columns are those of :mod:`hil.recording.series` (arrays flattened into ``<key>_<name>`` columns with the joint / channel
names, time columns ``time_s``, ``t``, ``stamp_ns``, ``log_time`` first). Layouts:

- ``mat``: one file ``RUN.mat``; one struct per topic (``sim/state`` -> ``sim_state``), one field per column
  (names made MATLAB identifiers; the original names are in ``<struct>.column_names``), and a ``metadata``
  struct with the recording's metadata records (robot / rig config text, versions).
- ``h5``: one file ``RUN.h5``; one group per topic (``/sim/state``), one dataset per column, the original
  column order in the group attribute ``columns``; metadata records as groups of string attributes under
  ``/metadata``.
- ``csv``: one file per topic ``<topic with / as _>.csv``, a header row of column names, floats written with
  ``repr`` (they read back exactly).
"""
from __future__ import annotations

import csv
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hil.recording.mcap_io import RawRecording, RecordingError, read_recording
from hil.recording.series import TIME_COLUMNS, Table, build_tables

FORMATS = ("mat", "h5", "csv")
_MATLAB_NAME_MAX = 63


def ordered_columns(table: Table) -> list[str]:
    """Time columns first, then the rest in payload order."""
    first = [c for c in (*TIME_COLUMNS, "sample_ns") if c in table.columns]
    return first + [c for c in table.columns if c not in first]


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


def export_csv(tables: dict[str, Table], out: Path) -> list[Path]:
    written = []
    for topic, table in tables.items():
        path = out / f"{topic_file_stem(topic)}.csv"
        numeric = ordered_columns(table)
        text = list(table.text)
        columns = [table.columns[c].tolist() for c in numeric] + [table.text[c] for c in text]
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(numeric + text)
            writer.writerows(zip(*columns))
        written.append(path)
    return written


def export_mat(tables: dict[str, Table], metadata: dict[str, dict[str, str]], path: Path) -> Path:
    from scipy.io import savemat

    variables: dict[str, object] = {}
    top_names: set[str] = {"metadata"}
    for topic, table in tables.items():
        fields: dict[str, object] = {}
        taken = {"column_names"}
        names = []
        for column in ordered_columns(table):
            fields[matlab_name(column, taken)] = table.columns[column]
            names.append(column)
        for column, values in table.text.items():
            fields[matlab_name(column, taken)] = np.array(values, dtype=object)
            names.append(column)
        fields["column_names"] = np.array(names, dtype=object)
        variables[matlab_name(topic, top_names)] = fields
    taken_meta: set[str] = set()
    variables["metadata"] = {matlab_name(name, taken_meta): {matlab_name(k, set()): v for k, v in record.items()}
                             for name, record in metadata.items()}
    savemat(path, variables, long_field_names=True, do_compression=True, oned_as="column")
    return path


def export_h5(tables: dict[str, Table], metadata: dict[str, dict[str, str]], path: Path) -> Path:
    import h5py

    string = h5py.string_dtype()
    with h5py.File(path, "w") as handle:
        for topic, table in tables.items():
            group = handle.require_group(topic)
            order = ordered_columns(table)
            for column in order:
                group.create_dataset(column, data=table.columns[column], compression="gzip", shuffle=True)
            for column, values in table.text.items():
                group.create_dataset(column, data=np.array(values, dtype=object), dtype=string)
            group.attrs["columns"] = order + list(table.text)
            group.attrs["topic"] = topic
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


def export(run: Path, fmt: str, out: Path, topics: list[str] | None = None, progress: bool = True) -> ExportResult:
    recording = read_recording(run, topics=set(topics) if topics else None, progress=progress)
    tables = build_tables(recording, topics=topics, progress=progress).tables
    if not tables:
        raise RecordingError(f"{run}: no messages" + (f" on {topics}" if topics else ""))
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        written = export_csv(tables, out)
    elif fmt == "mat":
        written = [export_mat(tables, recording.metadata, out / f"{run.stem}.mat")]
    else:
        written = [export_h5(tables, recording.metadata, out / f"{run.stem}.h5")]
    return ExportResult(written, recording, {topic: table.rows for topic, table in tables.items()},
                        {topic: len(recording.messages[topic]) for topic in tables})


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


def add_arguments(parser) -> None:
    parser.add_argument("run", metavar="RUN.mcap", help="recording made by mms record")
    parser.add_argument("--to", choices=FORMATS, required=True, help="output format")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: RUN.export/ beside the recording)")
    parser.add_argument("--topics", nargs="+", metavar="TOPIC", help="only these topics (default: all)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args) -> int:
    run_path = Path(args.run)
    out = Path(args.out) if args.out else run_path.with_suffix(".export")
    try:
        result = export(run_path, args.to, out, args.topics, progress=not args.no_progress)
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
