"""The swimming fish and the dead fish (sim/robots/fish.py, configs/robots/fish.toml, dead_fish.toml), their
``mms sim`` options and summaries, and ``mms sweep`` over the fish."""
from __future__ import annotations

import copy
import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.config import load_toml
from sim.robots import build_robot, fish

ROOT = Path(__file__).resolve().parents[2]
FISH = ROOT / "configs" / "robots" / "fish.toml"
DEAD_FISH = ROOT / "configs" / "robots" / "dead_fish.toml"
#: docs/swimming.md: the free test fish (A_tail = 0.1 L, C_f = 0.01), last three beats of a run of 2 ramp beats +
#: 6 beats: St 0.30-0.37 over 1-3 Hz; "roughly independent of frequency": the spread stays within 25 %.
STROUHAL_SPREAD = 0.25
SUMMARY_KEYS = {"steady_speed_m_s", "tailbeat_frequency_Hz", "tailbeat_amplitude_m", "strouhal", "mean_thrust_N",
                "cost_of_transport", "real_time_factor"}


def _run(path, duration, **muscle):
    from sim.cli_sim import simulate

    table = copy.deepcopy(load_toml(path))
    table["muscle"].update(muscle)
    model = build_robot(table, path)
    run = simulate(model, "rk4", model.metadata["parameters"]["dt"], duration, progress=False, record_every=5)
    return fish.summarize(run)


def test_free_fish_strouhal_is_in_the_cruising_band_at_every_frequency():
    strouhal, speeds = [], []
    for frequency in (1.5, 3.0):
        s = _run(FISH, 8.0 / frequency, frequency_Hz=frequency)
        assert s["warnings"] == []
        assert 0.2 <= s["strouhal"] <= 0.4, s
        strouhal.append(s["strouhal"])
        speeds.append(s["steady_speed_m_s"])
        assert s["tailbeat_amplitude_m"] == pytest.approx(2 * 0.03, rel=0.15)    # about twice a(L), recoil aside
        assert s["mean_thrust_N"] > 0.0 and s["cost_of_transport"] > 0.0
    assert abs(strouhal[1] / strouhal[0] - 1.0) < STROUHAL_SPREAD
    assert speeds[1] > 1.5 * speeds[0]                # speed ~ frequency at a constant Strouhal number


#: docs/swimming.md: the held dead fish's trailing edge beats at 1.36 Hz in the 1.2 Hz street over the last 2 s of
#: a 4 s run (ratio 1.13; the spectrum of a 2 s window resolves about 0.5 Hz, hence the band).
LOCK_IN_BAND = (0.8, 1.3)


def test_dead_fish_beats_with_the_street():
    s = _run(DEAD_FISH, 4.0)
    assert s["shedding_frequency_Hz"] == pytest.approx(0.2 * 0.3 / 0.05, rel=1e-12)
    assert LOCK_IN_BAND[0] < s["tailbeat_to_shedding_ratio"] < LOCK_IN_BAND[1], s
    assert s["tailbeat_amplitude_m"] > 0.03            # the street sweeps the passive tail from side to side
    assert s["flow_domain_exits"] == 0 and s["warnings"] == []
    assert math.isfinite(s["upstream_force_N"])


def test_free_dead_fish_is_swept_downstream_at_first():
    from sim.cli_sim import simulate

    table = copy.deepcopy(load_toml(DEAD_FISH))
    table["robot"]["base"] = "floating"
    model = build_robot(table, DEAD_FISH)
    run = simulate(model, "rk4", model.metadata["parameters"]["dt"], 0.6, progress=False, record_every=5)
    s = fish.summarize(run)
    assert s["drift_upstream_m_s"] < 0.0 and "upstream_force_N" not in s


def test_mms_sim_tailbeat_options_and_summary(tmp_path):
    summary = tmp_path / "summary.json"
    env = dict(os.environ, MPLBACKEND="Agg")
    result = subprocess.run([sys.executable, "-m", "hil.cli", "sim", str(FISH), "--tailbeat-frequency", "2.5",
                             "--tailbeat-amplitude", "0.02", "--duration", "1.5", "--out", str(tmp_path / "run"),
                             "--summary", str(summary), "--quiet", "--no-plots"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    data = json.loads(summary.read_text())
    assert SUMMARY_KEYS <= set(data)
    assert data["tailbeat_frequency_Hz"] == 2.5
    # a 0.02 m tail amplitude: the trailing edge sweeps about 4 cm once the ramp is over (1.5 s: still ramping)
    assert 0.0 < data["tailbeat_amplitude_m"] < 0.05


def test_sweep_over_the_fish(tmp_path):
    from sim import cli_sweep

    rows = cli_sweep.sweep(load_toml(FISH), FISH, [2.0, 3.0], [0.02, 0.03], duration=2.0, progress=False)
    assert [(r["amplitude"], r["tailbeat_frequency_Hz"]) for r in rows] == [
        (0.02, 2.0), (0.02, 3.0), (0.03, 2.0), (0.03, 3.0)]
    assert all(r["amplitude_unit"] == "m" for r in rows)
    assert rows[3]["steady_speed_m_s"] > rows[2]["steady_speed_m_s"] > rows[0]["steady_speed_m_s"] > 0.0
    assert rows[2]["tailbeat_amplitude_m"] > rows[0]["tailbeat_amplitude_m"]
    path = cli_sweep.write_csv(rows, tmp_path / "sweep.csv")
    with path.open() as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == 4 and set(table[0]) == set(cli_sweep.CSV_COLUMNS)
    assert cli_sweep.plot(rows, tmp_path / "sweep.png").stat().st_size > 1000
