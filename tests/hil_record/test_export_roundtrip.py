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
    return {"sim_time_s": [s["t"] for s in states], "q_tail_yaw_rad": q[:, 0], "q_tail_pitch_rad": q[:, 1],
            "base_wrench_fx_N": wrench[:, 0], "base_wrench_mz_N_m": wrench[:, 5],
            "joint_deflection_tail_yaw_rad": [s["strain"][0] for s in states]}


def _expected_state_clocks(states):
    return {"stamp_ns": [s["stamp_ns"] for s in states], "log_time_ns": [s["stamp_ns"] + 1000 for s in states]}


def _expected_telemetry_columns(frames):
    """Without a rig in the recording the gauges' and load cells' units are unknown: no suffix."""
    rows = [(f, i) for f in frames for i in range(len(f["device_us"]))]
    return {"servo_angle_tail_rad": [f["servo_rad"][i][0] for f, i in rows],
            "gauge_strain_g2": [f["strain"][i][1] for f, i in rows], "load_fx": [f["load"][i][0] for f, i in rows],
            "seq": [f["seq"] for f, i in rows]}


def _expected_telemetry_clocks(frames):
    rows = [(f, i) for f in frames for i in range(len(f["device_us"]))]
    return {"sample_ns": [f["host_ns"] - 1000 * (f["device_us"][-1] - f["device_us"][i]) for f, i in rows],
            "device_us": [f["device_us"][i] for f, i in rows]}


def test_export_mat_read_by_scipy(tmp_path, run, kit):
    path, states, frames = run
    result = kit.mms_run("export", str(path), "--to", "mat", "--out", str(tmp_path / "mat"), "--quiet")
    assert result.returncode == 0, result.stderr
    data = loadmat(tmp_path / "mat" / "run.mat", simplify_cells=True)
    state = data["sim_state"]
    for column, expected in _expected_state_columns(states).items():
        np.testing.assert_array_equal(np.ravel(state[column]), np.asarray(expected), err_msg=column)
    for column, expected in _expected_state_clocks(states).items():
        assert state["raw_clocks"][column].dtype == np.int64
        np.testing.assert_array_equal(np.ravel(state["raw_clocks"][column]), np.asarray(expected), err_msg=column)
    assert list(state["column_names"][:2]) == ["time_s", "v"] and "time_s: s since" in state["time_base"]
    assert state["units"]["base_wrench_mz_N_m"] == "N m" and state["units"]["seq"] == "-"
    telemetry = data["hw_telemetry"]
    for column, expected in _expected_telemetry_columns(frames).items():
        np.testing.assert_array_equal(np.ravel(telemetry[column]), np.asarray(expected), err_msg=column)
    for column, expected in _expected_telemetry_clocks(frames).items():
        np.testing.assert_array_equal(np.ravel(telemetry["raw_clocks"][column]), np.asarray(expected), err_msg=column)
    # one time base: no simulation time (all NaN before) and no integer clock among the telemetry's columns
    assert "t" not in telemetry and "sim_time_s" not in telemetry and "stamp_ns" not in telemetry
    assert data["sim_status"]["mode"].tolist() == ["realtime"] * len(data["sim_status"]["seq"])
    assert data["metadata"]["robot_config"]["text"] == "[robot]\nkind = 'flapper'\n"


def test_export_h5_read_by_h5py(tmp_path, run, kit):
    path, states, frames = run
    result = kit.mms_run("export", str(path), "--to", "h5", "--out", str(tmp_path / "h5"), "--quiet")
    assert result.returncode == 0, result.stderr
    with h5py.File(tmp_path / "h5" / "run.h5", "r") as handle:
        for column, expected in _expected_state_columns(states).items():
            np.testing.assert_array_equal(handle["sim/state"][column][()], np.asarray(expected), err_msg=column)
        for column, expected in _expected_telemetry_columns(frames).items():
            np.testing.assert_array_equal(handle["hw/telemetry"][column][()], np.asarray(expected), err_msg=column)
        for column, expected in _expected_telemetry_clocks(frames).items():
            clock = handle["hw/telemetry/raw_clocks"][column]
            np.testing.assert_array_equal(clock[()], np.asarray(expected), err_msg=column)
        assert handle["hw/telemetry/raw_clocks/stamp_ns"].dtype == np.int64
        assert handle["sim/state"]["q_tail_yaw_rad"].attrs["unit"] == "rad"
        assert [s.decode() for s in handle["sim/status"]["state"][()]] == ["running"] * 6
        assert list(handle["sim/state"].attrs["columns"][:4]) == ["time_s", "v", "seq", "sim_time_s"]
        assert handle["metadata/robot_config"].attrs["path"] == "robot.toml"


def test_export_csv_read_by_csv_module(tmp_path, run, kit):
    path, states, frames = run
    result = kit.mms_run("export", str(path), "--to", "csv", "--out", str(tmp_path / "csv"), "--topics",
                         "sim/state", "hw/telemetry", "--quiet")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "csv").iterdir()) == [
        "hw_telemetry.csv", "hw_telemetry_raw_clocks.csv", "sim_state.csv", "sim_state_raw_clocks.csv"]
    for name, expected_columns, rows in (("sim_state.csv", _expected_state_columns(states), N_STATES),
                                         ("sim_state_raw_clocks.csv", _expected_state_clocks(states), N_STATES),
                                         ("hw_telemetry.csv", _expected_telemetry_columns(frames),
                                          len(frames) * FRAME),
                                         ("hw_telemetry_raw_clocks.csv", _expected_telemetry_clocks(frames),
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


def test_exports_give_units_one_time_base_and_the_rigs_signs(tmp_path, kit):
    """A run with its rig stored: the sensors' units from the rig, and each mapped channel once more in its
    simulated signal's unit and sign (the thrust cell reads -base_wrench fx: scale -1 in the rig)."""
    run = tmp_path / "run.mcap"
    truth = kit.write_synthetic_run(run, duration_s=3.0)
    result = kit.mms_run("export", str(run), "--to", "csv", "--out", str(tmp_path / "csv"), "--quiet")
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "csv" / "hw_telemetry.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    header = list(rows[0])
    assert header[0] == "time_s" and [h for h in header if h.endswith(("_s", "_ns", "_us"))] == ["time_s"]
    assert {"servo_angle_tail_rad", "gauge_strain_fin_ray_left_m_per_m", "load_thrust_N",
            "load_thrust_as_base_wrench_fx_N", "servo_angle_tail_as_q_tail_yaw_rad"} <= set(header)
    load = np.array([float(r["load_thrust_N"]) for r in rows])
    as_wrench = np.array([float(r["load_thrust_as_base_wrench_fx_N"]) for r in rows])
    np.testing.assert_array_equal(as_wrench, -load)
    with open(tmp_path / "csv" / "sim_state.csv", newline="") as handle:
        wrench = np.array([float(r["base_wrench_fx_N"]) for r in csv.DictReader(handle)])
    # the measured thrust, in base_wrench's sign, has the simulated mean: -thrust_mean (the support pulls back)
    assert np.mean(as_wrench) == pytest.approx(np.mean(wrench), rel=0.05)
    assert np.mean(wrench) == pytest.approx(-truth["thrust_mean"], rel=0.05)

    kit.mms_run("export", str(run), "--to", "mat", "--out", str(tmp_path / "mat"), "--quiet")
    data = loadmat(tmp_path / "mat" / "run.mat", simplify_cells=True)
    telemetry = data["hw_telemetry"]
    assert telemetry["units"]["gauge_strain_fin_ray_left_m_per_m"] == "m/m"
    assert telemetry["units"]["load_thrust_as_base_wrench_fx_N"] == "N" and telemetry["units"]["time_s"] == "s"
    # every column MATLAB reads as a double (the int64 clocks apart, exact)
    numeric = [name for name in telemetry["column_names"] if name in telemetry]
    assert numeric and all(np.asarray(telemetry[name]).dtype == np.float64 for name in numeric)
    assert np.asarray(telemetry["raw_clocks"]["sample_ns"]).dtype == np.int64
    origin = min(int(np.min(data[t]["raw_clocks"]["stamp_ns"])) for t in ("sim_state", "hw_telemetry"))
    np.testing.assert_allclose(telemetry["time_s"], (telemetry["raw_clocks"]["sample_ns"] - origin) * 1e-9,
                               rtol=0, atol=1e-9)
