"""`mms sim` on the four Cosserat robots as real subprocesses (files, summary keys), and bad input refused in
one line naming the config key (sim/robots/cosserat.py, docs/cosserat.md)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.config import ConfigError, load_toml
from sim.robots import check_robot
from sim.robots.cosserat import build_example, simulate_offline

ROOT = Path(__file__).resolve().parents[2]
MMS = [sys.executable, "-m", "hil.cli"]
CONFIGS = ROOT / "configs" / "robots"
ROBOTS = ("earthworm", "inchworm", "snake2d", "snake3d")
SUMMARY_KEYS = {"head_displacement_m", "mean_head_velocity_m_s", "peak_head_speed_m_s", "max_contact_force_N",
                "cycle_mean_contact_force_N", "max_internal_torque_Nm", "closure_residual", "contact_residual",
                "sim_time_s", "wall_time_s", "real_time_factor"}
PLOTTED = "snake2d"
TIMEOUT = 240  # s, generous: the machine is shared


def mms(*args):
    return subprocess.run([*MMS, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.parametrize("robot", ROBOTS)
def test_mms_sim_writes_series_plots_and_summary(robot, tmp_path):
    out, summary = tmp_path / "run", tmp_path / "summary.json"
    plots = [] if robot == PLOTTED else ["--no-plots"]       # matplotlib costs seconds: one robot's plots
    done = mms("sim", robot, "--duration", 0.3, "--dt", 0.01, "--out", out, "--summary", summary, "--quiet", *plots)
    assert done.returncode == 0, done.stderr
    values = json.loads(summary.read_text())
    assert set(values) == SUMMARY_KEYS
    assert len(values["head_displacement_m"]) == 3 and len(values["cycle_mean_contact_force_N"]) == 3
    assert values["closure_residual"] <= 1e-8
    assert values["sim_time_s"] == pytest.approx(0.3)
    assert values["real_time_factor"] == pytest.approx(values["sim_time_s"] / values["wall_time_s"])
    meta = json.loads((out / "metadata.json").read_text())
    series = np.load(out / "timeseries.npz")
    assert set(series.files) == set(meta["arrays"])
    for name, info in meta["arrays"].items():
        assert list(series[name].shape) == info["shape"] and info["unit"]
    # the configs record every 10th step: t = 0, 0.1, 0.2, 0.3
    assert series["backbone"].shape == (4, 41, 3) and series["Lam"].shape == (4, 41, 6)
    head = series["base_pos"]
    assert np.allclose(series["backbone"][:, 0], head, atol=1e-12)      # station 0 is the head
    assert np.allclose(head[-1] - head[0], values["head_displacement_m"], atol=1e-12)
    assert meta["robot_metadata"]["example"] == robot
    for png in ("backbone.png", "contacts.png", "torque.png"):
        assert (out / png).is_file() == (robot == PLOTTED)
        assert robot != PLOTTED or (out / png).stat().st_size > 10_000
    if robot == "earthworm":        # moves toward -x at ~c = 0.3 m/s
        assert values["mean_head_velocity_m_s"][0] == pytest.approx(-0.3, rel=0.01)
    if robot == "inchworm":         # the head is the anchor in the first half period: it holds the weight
        assert values["head_displacement_m"] == [0.0, 0.0, 0.0]
        assert values["max_contact_force_N"] >= 0.999 * 9.81 * float(meta["robot_metadata"]["mass_kg"])


def changed(robot: str, tmp_path: Path, old: str, new: str) -> Path:
    text = (CONFIGS / f"{robot}.toml").read_text()
    assert old in text
    path = tmp_path / f"bad_{robot}.toml"
    path.write_text(text.replace(old, new))
    return path


def test_a_singular_strain_law_is_one_line_naming_the_key(tmp_path):
    bad = changed("earthworm", tmp_path, "eps = 0.004", "eps = 1.5")
    done = mms("sim", bad, "--duration", 0.1, "--out", tmp_path / "x")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "earthworm.eps" in done.stderr and "singular" in done.stderr
    assert "Traceback" not in done.stderr


def refused(path: Path, **options) -> str:
    """The ConfigError text of `mms sim` on path (in-process), with the generic options set."""
    config = load_toml(path)
    check_robot(config, path)
    args = argparse.Namespace(base=None, integrator=None, periodic=False, dt=0.01, duration=0.3, periods=None,
                              record_every=1)
    vars(args).update(options)
    with pytest.raises(ConfigError) as error:
        simulate_offline(config, path, args, False)
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("robot, old, new, key", [
    ("earthworm", "wavelength_m = 1.0", "wavelength_m = 0.7", "earthworm.wavelength_m"),   # anchor off the body
    ("earthworm", "wavelength_m = 1.0", "wavelength_m = 2.0", "earthworm.wavelength_m"),
    ("snake2d", "supports = 5", "supports = 1", "snake.supports"),                       # cannot hold the body
    ("snake2d", "supports = 5", "supports = 0", "snake.supports"),
    ("snake2d", "V_o_m_s = -0.5", "V_o_m_s = 0.0", "snake.V_o_m_s"),
    ("snake3d", "b_y_1_m = 0.5", "b_y_1_n = 0.5", "snake"),                             # misspelt key
])
def test_bad_configs_are_refused_naming_the_key(tmp_path, robot, old, new, key):
    path = changed(robot, tmp_path, old, new)
    if "b_y_1_n" in new:
        with pytest.raises(ConfigError, match="b_y_1_n"):
            check_robot(load_toml(path), path)
        return
    assert key in refused(path)


def test_generic_options_that_do_not_apply_are_refused():
    path = CONFIGS / "snake2d.toml"
    assert "--base" in refused(path, base="free")
    assert "--integrator" in refused(path, integrator="rk45")
    message = refused(path, duration=None, periods=None, dt=-1.0)
    assert "--dt" in message


def test_every_shipped_robot_builds_with_the_spec_defaults():
    for robot in ROBOTS:
        path = CONFIGS / f"{robot}.toml"
        config = load_toml(path)
        check_robot(config, path)
        example = build_example(config, path)
        assert example.rod.n_X == 200 and example.rod.length == 1.0


def test_the_record_every_option_overrides_the_config_even_at_1():
    """`--record-every 1` records every step of a robot whose file says record_every = 10; no option: the file's."""
    path = CONFIGS / "earthworm.toml"
    config = load_toml(path)
    assert config["simulation"]["record_every"] == 10
    times = {}
    for option in (None, 1):
        args = argparse.Namespace(base=None, integrator=None, periodic=False, dt=0.01, duration=0.1, periods=None,
                                  record_every=option)
        times[option] = simulate_offline(config, path, args, False).t
    assert np.allclose(times[None], [0.0, 0.1])
    assert np.allclose(times[1], np.arange(11) * 0.01)
