"""What a run's summary must say about the base besides its robot's figures: how far it drifted and whether it
tumbled, and a warning when the run is not the steady state the summary's figures describe (pure numpy).

``mms sim --summary`` (sim/cli_sim.py) writes these keys for every robot whose ``summarize`` hook adds them
(the flapper, RayBot), and prints the warnings on stderr.
"""
from __future__ import annotations

import math

import numpy as np

#: a base pitched further than this from level has turned past the vertical: it tumbled, deg
TUMBLE_PITCH_DEG = 90.0


def base_pitch(quat: np.ndarray) -> np.ndarray:
    """Nose-up pitch (rad) of the base's x axis above the horizontal, (T,), from quaternions (T, 4) (w, x, y, z):
    atan2 of the x axis' vertical and horizontal-forward world components, unwrapped so that a base tumbling past
    the vertical stays continuous."""
    w, x, y, z = quat[:, 0], quat[:, 1], quat[:, 2], quat[:, 3]
    up = 2.0 * (x * z - w * y)                 # R[2, 0]
    forward = 1.0 - 2.0 * (y * y + z * z)      # R[0, 0]
    return np.unwrap(np.arctan2(up, forward))


def total_rotation(quat: np.ndarray) -> float:
    """The angle the base turned through over the run, summed step by step (rad): the sum of the rotation angles
    between consecutive orientations (so a turn and back counts twice; a constant orientation gives 0)."""
    if len(quat) < 2:
        return 0.0
    dots = np.abs(np.einsum("ij,ij->i", quat[1:], quat[:-1]))
    return float(np.sum(2.0 * np.arccos(np.clip(dots, -1.0, 1.0))))


def base_motion(t: np.ndarray, arrays: dict) -> dict:
    """The drift and tumbling of the base over the whole run: ``base_drift_m`` (net displacement, m),
    ``base_vertical_drift_m`` (its world-z part, m, + up), ``base_max_abs_pitch_deg`` (the largest nose-up or
    nose-down pitch of its x axis from the horizontal), ``base_total_rotation_deg`` (the angle turned through)."""
    pos, quat = arrays["base_pos"], arrays["base_quat"]
    travel = pos[-1] - pos[0]
    return {"base_drift_m": float(np.linalg.norm(travel)), "base_vertical_drift_m": float(travel[2]),
            "base_max_abs_pitch_deg": math.degrees(float(np.max(np.abs(base_pitch(quat))))),
            "base_total_rotation_deg": math.degrees(total_rotation(quat))}


def steady_state_warnings(motion: dict, steady: str, drift_limit_m: float) -> list[str]:
    """Why a run is not the ``steady`` state (e.g. "hover") its summary describes: its base drifted more than
    ``drift_limit_m`` or tumbled (pitch beyond :data:`TUMBLE_PITCH_DEG`). Empty when it is."""
    warnings = []
    if motion["base_drift_m"] > drift_limit_m:
        warnings.append(f"the base drifted {1e3 * motion['base_drift_m']:.0f} mm "
                        f"({1e3 * motion['base_vertical_drift_m']:+.0f} mm vertically) over the run, more than "
                        f"{1e3 * drift_limit_m:.0f} mm: not a {steady}")
    if motion["base_max_abs_pitch_deg"] > TUMBLE_PITCH_DEG:
        warnings.append(f"the base tumbled: pitch up to {motion['base_max_abs_pitch_deg']:.0f} deg from level, "
                        f"{motion['base_total_rotation_deg']:.0f} deg turned in all: not a {steady}")
    return warnings
