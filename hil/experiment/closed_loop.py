"""`mms demo --closed-loop` (docs/closed-loop.md): the demo's simulator runs the robot in free flight with the
rig's measured wrench fed back (``mms serve --feedback``), and the thorax's motion is set against two offline
runs from the same start: the model alone (the open loop) and the plant's truth in free flight (the rig file's
``[emulator.physics.overrides]``, the stroke the model's own law: the structure is what the loop corrects).

The figures: the RMS over the run of the thorax's body-frame twist (V m/s, Omega rad/s) of each run minus the
truth's, per component, and their ratio closed over open (below 1: the closed loop is nearer the truth).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import msgpack
import numpy as np

from sim.config import load_toml
from sim.messages import TOPIC_SIM_STATE

#: the thorax twist components of a mirror-symmetric stroke (the others stay zero): forward and vertical speed,
#: pitch rate
COMPONENTS = {"vx": 0, "vz": 2, "wy": 4}
#: the base of the closed loop's robot: free flight
FREE = "floating"


def free_robot_config(config: dict) -> dict:
    """The demo robot's config in free flight (the closed loop moves the thorax)."""
    free = copy.deepcopy(config)
    free["robot"]["base"] = FREE
    return free


def truth_config(robot_config: dict, rig_path: Path) -> dict:
    """The robot's config with the rig's truth (its [emulator.physics.overrides] tables but the base, which stays
    free)."""
    from firmware_interface.rigs.mcu import deep_merge

    overrides = copy.deepcopy(load_toml(rig_path)["emulator"]["physics"].get("overrides", {}))
    overrides.get("robot", {}).pop("base", None)
    return deep_merge(copy.deepcopy(robot_config), overrides)


def recorded_thorax(recording: Path) -> tuple[np.ndarray, np.ndarray]:
    """The closed loop's sim/state: times (n,) s and thorax twists (n, 6) (body frame; m/s, rad/s)."""
    from mcap.reader import make_reader

    times, twists = [], []
    with recording.open("rb") as handle:
        for _schema, channel, message in make_reader(handle).iter_messages(topics=[TOPIC_SIM_STATE]):
            if channel.message_encoding == "msgpack":
                state = msgpack.unpackb(message.data, raw=False)
                times.append(state["t"])
                twists.append(state["base_twist"])
    return np.asarray(times), np.asarray(twists)


def simulated_thorax(config: dict, path: Path, times: np.ndarray) -> np.ndarray:
    """Thorax twists (n, 6) of ``config`` run offline from rest at ``times`` (n,) s: the publish times k T of the
    server, which the step divides (the demo's 0.5 ms into 1 ms)."""
    from sim.robots import build_robot
    from sim.simulation import Simulation

    dt = config["simulation"]["dt"]
    period = float(np.median(np.diff(times)))
    every = round(period / dt)
    simulation = Simulation(build_robot(config, path), integrator=config["simulation"]["integrator"], dt=dt)
    simulation.reset()
    at, outputs = simulation.record(round(times[-1] / period), every)
    rows = np.rint(times / period).astype(int) - 1
    if not np.allclose(at[rows], times):
        raise ValueError(f"the recorded states are not on the publish grid of {period:g} s")
    return outputs["base_twist"][rows]


def compare(recording: Path, robot: Path, rig: Path, out: Path, say) -> dict:
    """The closed loop's thorax against the open loop and the truth (figures in ``out``/closed_loop.json and a plot
    closed_loop.png); the figures."""
    times, closed = recorded_thorax(recording)
    keep = times > 0.0
    times, closed = times[keep], closed[keep]
    config = load_toml(robot)
    say(f"closed loop: {times.size} states over {times[-1]:.2f} s; running the open loop and the truth offline")
    open_loop = simulated_thorax(config, robot, times)
    truth = simulated_thorax(truth_config(config, rig), robot, times)
    rms = lambda x: float(np.sqrt(np.mean(x * x)))  # noqa: E731 - one-line local
    figures = {"duration_s": float(times[-1]), "states": int(times.size), "components": {}}
    for name, k in COMPONENTS.items():
        closed_error, open_error = rms(closed[:, k] - truth[:, k]), rms(open_loop[:, k] - truth[:, k])
        figures["components"][name] = {"truth_rms": rms(truth[:, k]), "closed_error_rms": closed_error,
                                       "open_error_rms": open_error,
                                       "closed_minus_open_rms": rms(closed[:, k] - open_loop[:, k]),
                                       "ratio": closed_error / open_error if open_error > 0 else float("inf")}
    out.mkdir(parents=True, exist_ok=True)
    (out / "closed_loop.json").write_text(json.dumps(figures, indent=2))
    _plot(times, closed, open_loop, truth, out / "closed_loop.png")
    for name, entry in figures["components"].items():
        say(f"thorax {name}: closed loop {entry['closed_error_rms']:.4g} from the truth, open loop "
            f"{entry['open_error_rms']:.4g} (ratio {entry['ratio']:.3f}; the truth's RMS {entry['truth_rms']:.4g})")
    return figures


def _plot(times, closed, open_loop, truth, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(COMPONENTS), 1, sharex=True, figsize=(8, 7))
    units = {"vx": "m/s", "vz": "m/s", "wy": "rad/s"}
    for axis, (name, k) in zip(axes, COMPONENTS.items()):
        axis.plot(times, truth[:, k] - open_loop[:, k], label="truth - open loop", color="0.6")
        axis.plot(times, closed[:, k] - open_loop[:, k], label="closed loop - open loop", color="C3", lw=0.8)
        axis.set_ylabel(f"{name} ({units[name]})")
    axes[0].legend(loc="upper left")
    axes[-1].set_xlabel("t (s)")
    axes[0].set_title("Thorax twist: the closed loop and the truth, each minus the open loop")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
