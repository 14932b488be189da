"""Figures of a swimming run shared by every swimmer (RayBot, the fish, the dead fish): docs/swimming.md.

From a recorded run (``t`` (T,) s and the arrays of ``Simulation.outputs()``: base_pos (T, 3) m, base_quat
(T, 4), base_twist (T, 6), q, qd, tau (T, n)) and the model's metadata (``tail_tip``: (body name, pose (4, 4) of
the trailing edge in that body), ``body_length_m``), the steady figures over the last whole beats:
``steady_speed_m_s`` (signed, forward positive), ``tailbeat_frequency_Hz``, ``tailbeat_amplitude_m`` (peak to
peak of the trailing edge across the mean heading), ``strouhal`` (``f A_pp / U``), ``mean_thrust_N`` (Lighthill's
trailing-edge force along the heading), ``cost_of_transport`` (actuator power / (m g U)).
"""
from __future__ import annotations

import math

import numpy as np

from sim.model import Data, Model
from sim.spatial import quat_to_matrix

#: Slack (s) when cutting the analysis window, so a window of whole beats keeps its first sample.
WINDOW_TIME_SLACK = 1e-9
#: Standard gravity, m/s^2: the cost of transport's weight (m g), also for a swimmer simulated without gravity.
STANDARD_GRAVITY = 9.80665


def steady_window(t: np.ndarray, frequency: float, cycles: float = 3.0) -> np.ndarray:
    """Boolean mask (T,) of the analysis window: the last whole ``cycles`` tail beats (or the last half of the
    run when it is shorter than twice that, or has no beat)."""
    duration = float(t[-1] - t[0])
    span = cycles / frequency if frequency > 0.0 else math.inf
    if not span <= 0.5 * duration:
        span = 0.5 * duration
    return t >= t[-1] - span - WINDOW_TIME_SLACK


def heading(quat: np.ndarray) -> np.ndarray:
    """The base's mean heading (2,): its body x axis (head) projected on the horizontal, averaged over the
    quaternions (T, 4) (w, x, y, z) given and made a unit vector ((1, 0) when it points straight up or down)."""
    w, x, y, z = quat[:, 0], quat[:, 1], quat[:, 2], quat[:, 3]
    axis = np.array([np.mean(1.0 - 2.0 * (y * y + z * z)), np.mean(2.0 * (x * y + w * z))])   # R[0, 0], R[1, 0]
    norm = float(np.linalg.norm(axis))
    return axis / norm if norm > 0.0 else np.array([1.0, 0.0])


def _rotations_about(axis: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Rotation matrices (T, 3, 3) of ``angles`` (T,) rad about the unit ``axis`` (3,) (Rodrigues)."""
    x, y, z = axis
    c, s = np.cos(angles), np.sin(angles)
    C = 1.0 - c
    return np.stack([np.stack([c + x * x * C, x * y * C - z * s, x * z * C + y * s], axis=-1),
                     np.stack([y * x * C + z * s, c + y * y * C, y * z * C - x * s], axis=-1),
                     np.stack([z * x * C - y * s, z * y * C + x * s, c + z * z * C], axis=-1)], axis=-2)


def tail_tip_positions(model: Model, base_pos: np.ndarray, base_quat: np.ndarray, q: np.ndarray) -> np.ndarray:
    """World positions (T, 3) m of the trailing edge (``model.metadata["tail_tip"]``) from recorded base
    positions (T, 3), base quaternions (T, 4) (w, x, y, z) and joint positions (T, n), by forward kinematics along
    the revolute chain from the base (all samples at once)."""
    body_name, tip_pose = model.metadata["tail_tip"]
    chain = []
    j = model.body_names.index(body_name)
    while j > 0:
        chain.append(j)
        j = int(model.parent[j])
    chain.reverse()
    quat = np.asarray(base_quat, dtype=float)
    g = np.zeros((len(q), 4, 4))
    g[:, :3, :3] = [quat_to_matrix(row / np.linalg.norm(row)) for row in quat]
    g[:, :3, 3] = base_pos
    g[:, 3, 3] = 1.0
    joint = np.zeros_like(g)
    joint[:, 3, 3] = 1.0
    for j in chain:
        joint[:, :3, :3] = _rotations_about(model.joint_axis[j, 3:], np.asarray(q, dtype=float)[:, j - 1])
        g = g @ model.joint_placement[j] @ joint
    return (g @ tip_pose)[:, :3, 3]


def lighthill_models(model: Model) -> list:
    from sim.lighthill import Lighthill
    return [m for m in model.force_models if isinstance(m, Lighthill)]


def replay_trailing_edge(model: Model, t: np.ndarray, arrays: dict) -> tuple[np.ndarray, int]:
    """The Lighthill trailing-edge force (T, 3) N, world axes, at each recorded state (the force models
    evaluated again on the recorded pose, twist and joint state), and the number of sections that were evaluated
    outside the ambient flow's domain in those states. Zeros and 0 when the model has no Lighthill plug-in."""
    from sim.dynamics import hybrid_step

    models = lighthill_models(model)
    force = np.zeros((len(t), 3))
    if not models:
        return force, 0
    data = Data(model)
    for m in models:
        m.packed_view("outside")[:] = 0.0
    zeros = np.zeros(model.n)
    pose = np.eye(4)
    for i in range(len(t)):
        quat = arrays["base_quat"][i]
        pose[:3, :3] = quat_to_matrix(quat / np.linalg.norm(quat))
        pose[:3, 3] = arrays["base_pos"][i]
        hybrid_step(model, data, float(t[i]), pose, arrays["base_twist"][i], arrays["q"][i], arrays["qd"][i],
                    zeros, zeros)
        for m in models:
            force[i] += m.trailing_edge_force_world.sum(axis=0)
    return force, int(sum(m.outside_count for m in models))


def swim_figures(model: Model, t: np.ndarray, arrays: dict, frequency: float) -> dict:
    """The steady figures of the module docstring over :func:`steady_window` (``frequency`` Hz: the beat,
    0 for none), plus ``vertical_speed_m_s`` (world z, + up), ``body_lengths_per_s`` and
    ``flow_domain_exits`` (sections evaluated outside the flow's domain in the window, bad input counted)."""
    window = steady_window(t, frequency)
    pos, quat = arrays["base_pos"], arrays["base_quat"]
    tw, pw = t[window], pos[window]
    elapsed = float(tw[-1] - tw[0])
    ahead = heading(quat[window])
    travel = pw[-1] - pw[0]
    speed = float(travel[:2] @ ahead / elapsed) if elapsed > 0 else 0.0
    vertical = float(travel[2] / elapsed) if elapsed > 0 else 0.0
    tip = tail_tip_positions(model, pw, quat[window], arrays["q"][window])
    across = tip[:, 0] * -ahead[1] + tip[:, 1] * ahead[0]
    if tw.size > 2:
        across = across - np.polyval(np.polyfit(tw, across, 1), tw)
    amplitude = float(np.ptp(across))
    te_force, exits = replay_trailing_edge(model, tw, {k: v[window] for k, v in arrays.items()})
    thrust = float(np.mean(te_force[:, :2] @ ahead)) if lighthill_models(model) else None
    actuated = np.asarray(model.actuated, dtype=bool)
    power = float(np.mean(np.sum((arrays["tau"][window] * arrays["qd"][window])[:, actuated], axis=1)))
    mass = model.total_mass()
    return {
        "steady_speed_m_s": speed,
        "vertical_speed_m_s": vertical,
        "tailbeat_frequency_Hz": frequency,
        "tailbeat_amplitude_m": amplitude,
        "strouhal": frequency * amplitude / speed if speed > 0.0 and frequency > 0.0 else None,
        "mean_thrust_N": thrust,
        "mean_power_W": power,
        "cost_of_transport": power / (mass * STANDARD_GRAVITY * speed) if speed > 0.0 else None,
        "body_lengths_per_s": speed / model.metadata["body_length_m"],
        "steady_window_s": elapsed,
        "flow_domain_exits": exits,
    }


def swing_frequency(t: np.ndarray, signal: np.ndarray, hysteresis: float) -> float:
    """Full swings per second (Hz) of ``signal`` (T,) sampled at ``t`` (T,) s: its mean and linear trend removed,
    the number of passages from below ``-h`` to above ``+h`` (``h = hysteresis`` times its RMS: jitter about the
    mean is not a swing) over the record's duration. A sinusoid of frequency f gives f; unlike a spectral peak it
    is a mean over every swing, so it converges for an irregular (chaotic) signal. 0 for fewer than 4 samples."""
    if t.size < 4:
        return 0.0
    x = signal - np.polyval(np.polyfit(t, signal, 1), t)
    h = hysteresis * float(np.sqrt(np.mean(x * x)))
    swings, below = 0, False
    for value in x:
        if value < -h:
            below = True
        elif value > h and below:
            swings += 1
            below = False
    return swings / float(t[-1] - t[0])


def band_power_fraction(t: np.ndarray, signal: np.ndarray, f_low: float, f_high: float, segment_s: float) -> float:
    """Fraction of the variance of ``signal`` (T,) sampled at ``t`` (T,) s (uniform) between ``f_low`` and
    ``f_high`` Hz: Welch's estimate (Hann segments of ``segment_s`` s or the whole record, half overlapping, each
    detrended). 0 for fewer than 4 samples or a constant signal."""
    from scipy.signal import welch

    if t.size < 4:
        return 0.0
    rate = 1.0 / float(t[1] - t[0])
    per_segment = min(t.size, max(4, int(round(segment_s * rate))))
    f, power = welch(signal, fs=rate, nperseg=per_segment, detrend="linear")
    total = float(power[1:].sum())
    return float(power[(f >= f_low) & (f <= f_high)].sum()) / total if total > 0.0 else 0.0


def batch_mean_error(values: np.ndarray, batches: int) -> float:
    """Standard error of the mean of a correlated series ``values`` (T,) by batch means: the series cut into
    ``batches`` equal parts (each longer than its correlation time), the standard deviation of their means over
    sqrt(batches). NaN for fewer than 2 batches."""
    if batches < 2 or values.size < batches:
        return math.nan
    means = np.array([part.mean() for part in np.array_split(values, batches)])
    return float(np.std(means, ddof=1) / math.sqrt(batches))
