"""`mms export` round trips: .mat read by scipy.io.loadmat, HDF5 by h5py, CSV by the csv module; every value
compared with the payloads that were recorded (not with our own decoding)."""
from __future__ import annotations

import csv

import h5py
import msgpack
import numpy as np
import pytest
from scipy.io import loadmat

from hil.recording.mcap_io import RecordingWriter

JOINTS = ["tail_yaw", "tail_pitch"]
N_STATES, FRAME = 60, 4


@pytest.fixture
def run(tmp_path, kit):
    """A small recording of sim/state, sim/status and batched hw/telemetry; returns its path and the payloads."""
    path = tmp_path / "run.mcap"
    writer = RecordingWriter(path)
    writer.add_metadata("robot_config", {"path": "robot.toml", "text": "[robot]\nkind = 'flapper'\n"})
    states, frames = [], []
    base = 1_700_000_000_000_000_000
    for k in range(N_STATES):
        payload = kit.sim_state(k, k * 0.01, [0.1 * k, -0.2 * k], strain=[0.001 * k, 0.0],
                                base_wrench=[k, 0.5, 0, 0, 0, -k])
        payload["stamp_ns"] = base + k * 10_000_000
        states.append(payload)
        writer.add("sim/state", msgpack.packb(payload), payload["stamp_ns"] + 1000, payload["stamp_ns"], k)
        if k % 10 == 0:
            status = kit.sim_status(k // 10, k * 0.01)
            status["stamp_ns"] = payload["stamp_ns"]
            writer.add("sim/status", msgpack.packb(status), status["stamp_ns"] + 500, status["stamp_ns"], k // 10)
        if k % FRAME == FRAME - 1:
            device_us = [(k - FRAME + 1 + i) * 10_000 for i in range(FRAME)]
            frame = {"v": 1, "seq": k // FRAME, "stamp_ns": payload["stamp_ns"] + 7, "host_ns": payload["stamp_ns"],
                     "device_us": device_us, "servo_names": ["tail"],
                     "servo_rad": [[0.01 * u / 10_000] for u in device_us], "strain_names": ["g1", "g2"],
                     "strain": [[1e-6 * i, -1e-6 * i] for i in range(FRAME)], "load_names": ["fx"],
                     "load": [[0.25]] * FRAME}
            frames.append(frame)
            writer.add("hw/telemetry", msgpack.packb(frame), frame["stamp_ns"] + 100, frame["stamp_ns"], k // FRAME)
    writer.close()
    return path, states, frames


def _expected_state_columns(states):
    q = np.array([s["q"] for s in states])
    wrench = np.array([s["base_wrench"] for s in states])
    return {"t": [s["t"] for s in states], "stamp_ns": [s["stamp_ns"] for s in states],
            "log_time": [s["stamp_ns"] + 1000 for s in states],
            "q_tail_yaw": q[:, 0], "q_tail_pitch": q[:, 1], "base_wrench_fx": wrench[:, 0],
            "base_wrench_mz": wrench[:, 5], "strain_tail_yaw": [s["strain"][0] for s in states]}


def _expected_telemetry_columns(frames):
    rows = [(f, i) for f in frames for i in range(len(f["device_us"]))]
    return {"sample_ns": [f["host_ns"] - 1000 * (f["device_us"][-1] - f["device_us"][i]) for f, i in rows],
            "servo_rad_tail": [f["servo_rad"][i][0] for f, i in rows],
            "strain_g2": [f["strain"][i][1] for f, i in rows], "load_fx": [f["load"][i][0] for f, i in rows],
            "seq": [f["seq"] for f, i in rows]}


def test_export_mat_read_by_scipy(tmp_path, run, kit):
    path, states, frames = run
    result = kit.mms_run("export", str(path), "--to", "mat", "--out", str(tmp_path / "mat"), "--no-progress")
    assert result.returncode == 0, result.stderr
    data = loadmat(tmp_path / "mat" / "run.mat", simplify_cells=True)
    state = data["sim_state"]
    for column, expected in _expected_state_columns(states).items():
        np.testing.assert_array_equal(np.ravel(state[column]), np.asarray(expected), err_msg=column)
    assert list(state["column_names"][:4]) == ["time_s", "t", "stamp_ns", "log_time"]
    telemetry = data["hw_telemetry"]
    for column, expected in _expected_telemetry_columns(frames).items():
        np.testing.assert_array_equal(np.ravel(telemetry[column]), np.asarray(expected), err_msg=column)
    assert data["sim_status"]["mode"].tolist() == ["realtime"] * len(data["sim_status"]["seq"])
    assert data["metadata"]["robot_config"]["text"] == "[robot]\nkind = 'flapper'\n"


def test_export_h5_read_by_h5py(tmp_path, run, kit):
    path, states, frames = run
    result = kit.mms_run("export", str(path), "--to", "h5", "--out", str(tmp_path / "h5"), "--no-progress")
    assert result.returncode == 0, result.stderr
    with h5py.File(tmp_path / "h5" / "run.h5", "r") as handle:
        for column, expected in _expected_state_columns(states).items():
            np.testing.assert_array_equal(handle["sim/state"][column][()], np.asarray(expected), err_msg=column)
        for column, expected in _expected_telemetry_columns(frames).items():
            np.testing.assert_array_equal(handle["hw/telemetry"][column][()], np.asarray(expected), err_msg=column)
        assert handle["hw/telemetry"]["stamp_ns"].dtype == np.int64
        assert [s.decode() for s in handle["sim/status"]["state"][()]] == ["running"] * 6
        assert list(handle["sim/state"].attrs["columns"][:4]) == ["time_s", "t", "stamp_ns", "log_time"]
        assert handle["metadata/robot_config"].attrs["path"] == "robot.toml"


def test_export_csv_read_by_csv_module(tmp_path, run, kit):
    path, states, frames = run
    result = kit.mms_run("export", str(path), "--to", "csv", "--out", str(tmp_path / "csv"), "--topics",
                         "sim/state", "hw/telemetry", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "csv").iterdir()) == ["hw_telemetry.csv", "sim_state.csv"]
    for name, expected_columns, rows in (("sim_state.csv", _expected_state_columns(states), N_STATES),
                                         ("hw_telemetry.csv", _expected_telemetry_columns(frames),
                                          len(frames) * FRAME)):
        with open(tmp_path / "csv" / name, newline="") as handle:
            table = list(csv.DictReader(handle))
        assert len(table) == rows
        for column, expected in expected_columns.items():
            parsed = [float(row[column]) if "." in row[column] or "e" in row[column] else int(row[column])
                      for row in table]
            assert parsed == list(np.asarray(expected).tolist()), column


def test_export_refuses_a_missing_file_in_one_line(tmp_path, kit):
    result = kit.mms_run("export", str(tmp_path / "nope.mcap"), "--to", "csv")
    assert result.returncode == 2 and "no such file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_parallel_decode_in_worker_processes_equals_the_sequential_one(run, monkeypatch):
    """Large recordings are decoded in forked workers, in ranges of messages joined in order: the tables must be
    the same as in-process."""
    from hil.recording import series
    from hil.recording.mcap_io import read_recording

    path, _states, _frames = run
    recording = read_recording(path)
    sequential = series.build_tables(recording)
    monkeypatch.setattr(series, "PARALLEL_MIN_MESSAGES", 1)
    monkeypatch.setattr(series, "_BATCH", 7)   # small ranges: sim/state comes back in several parts, joined
    monkeypatch.setattr(series.os, "cpu_count", lambda: 2)
    parallel = series.build_tables(recording)
    assert set(parallel.tables) == set(sequential.tables) == {"sim/state", "sim/status", "hw/telemetry"}
    for topic, table in sequential.tables.items():
        other = parallel.tables[topic]
        assert list(other.columns) == list(table.columns)
        for name, column in table.columns.items():
            np.testing.assert_array_equal(other.columns[name], column, err_msg=f"{topic}:{name}")
        assert other.text == table.text and other.element_names == table.element_names
