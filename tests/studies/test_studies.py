"""Studies on a real Dask cluster (sim/studies.py): ``mms sweep --scheduler tcp://...`` against a ``LocalCluster`` of
two worker processes gives the serial run's rows, reports a failed simulation with its parameters and goes on, and
shows its progress; a scheduler nobody runs is one line."""
from __future__ import annotations

import csv
import socket

from hil.cli import main as mms_main
from sim import cli_sweep, studies
from sim.config import load_toml, shipped_config

#: two points per amplitude; 95 deg is beyond the flapper's 90 deg stroke limit: those runs fail in the worker
FREQUENCIES, AMPLITUDES = ("50", "60"), ("30", "95")
#: one stroke period at the slower point (summarize needs one): a few hundred steps per run
DURATION_S = "0.021"


def _robot(tmp_path):
    import tomli_w

    config = load_toml(shipped_config("robot", "flapper"))
    config["wing"]["sections"] = 1
    path = tmp_path / "flapper1.toml"
    path.write_text(tomli_w.dumps(config))
    return path, config


def _without_timing(rows):
    return [{k: v for k, v in row.items() if k != cli_sweep.TIMING_COLUMN} for row in rows]


def test_a_sweep_on_a_dask_cluster_equals_the_serial_run_and_goes_on_past_a_failed_simulation(tmp_path, capsys):
    from distributed import LocalCluster

    robot, config = _robot(tmp_path)
    serial = cli_sweep.sweep(config, robot, [float(f) for f in FREQUENCIES], [float(a) for a in AMPLITUDES],
                             float(DURATION_S), progress=False)
    capsys.readouterr()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        code = mms_main(["sweep", str(robot), "--frequencies", *FREQUENCIES, "--amplitudes", *AMPLITUDES,
                         "--duration", DURATION_S, "--scheduler", cluster.scheduler_address, "--out",
                         str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"the Dask cluster at {cluster.scheduler_address} (2 workers)" in captured.out
    failures = [line for line in captured.err.splitlines() if "simulation failed" in line]
    assert len(failures) == 2 and all("amplitude 95 deg" in line and "stroke.amplitude_deg" in line
                                      for line in failures), captured.err
    assert "sweep: 100%" in captured.err and "4/4" in captured.err           # the progress bar
    with open(tmp_path / "out" / "sweep.csv") as handle:
        table = list(csv.DictReader(handle))
    assert [row["peak_stroke_torque_Nm"] == "" for row in table] == [False, False, True, True]
    # the cluster's rows are the serial run's, to the last digit (the real-time factor is the machine's)
    from_cluster = [{k: (None if v == "" else v) for k, v in row.items()} for row in table]
    expected = [{k: (None if v is None else str(v)) for k, v in row.items()} for row in serial]
    assert _without_timing(from_cluster) == _without_timing(expected)


def test_an_unreachable_scheduler_is_one_line(tmp_path, capsys, monkeypatch):
    with socket.socket() as s:          # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(studies, "CONNECT_TIMEOUT_S", 1.0)
    robot, _config = _robot(tmp_path)
    code = mms_main(["sweep", str(robot), "--frequencies", "50", "--duration", DURATION_S, "--scheduler",
                     f"tcp://127.0.0.1:{port}", "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"--scheduler: no Dask scheduler answered at tcp://127.0.0.1:{port} within 1 s" in err[0]
    assert mms_main(["sweep", str(robot), "--frequencies", "50", "--scheduler", "cluster", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expected local, serial or tcp://HOST:PORT" in err[0]


def test_a_failed_task_is_reported_with_its_parameters_serially_too(capsys):
    results = studies.Evaluator().map(_reciprocal, [2.0, 0.0, 4.0], describe=lambda x: f"x={x:g}")
    assert results[0] == 0.5 and results[2] == 0.25 and isinstance(results[1], studies.Failure)
    assert "simulation failed (x=0): ZeroDivisionError" in capsys.readouterr().err


def _reciprocal(x: float) -> float:
    return 1.0 / x
