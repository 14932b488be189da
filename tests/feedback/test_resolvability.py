"""The closed-loop demo's resolvability criterion (docs/closed-loop.md, "Which components the rig resolves"): the
stroke decomposition and the noise it sets against the signal, on signals whose parts and noise are known."""
from __future__ import annotations

import dataclasses

import numpy as np

from hil.experiment.closed_loop import stroke_noise, stroke_parts

PERIOD_S = 0.2
HARMONICS = 4
RATE_HZ = 1000.0


@dataclasses.dataclass(frozen=True)
class _Table:
    """The [feedback] keys stroke_noise reads: no smoothing (one sample wide), no latency."""
    period_s: float = PERIOD_S
    smoothing_s: float = 1.0 / RATE_HZ
    latency_s: float = 0.0


def test_the_stroke_fit_recovers_a_known_mean_ramp_and_harmonics():
    times = np.arange(2000) / RATE_HZ + 2.3                  # 10 strokes from an arbitrary phase, s
    omega = 2.0 * np.pi / PERIOD_S
    amplitudes = [(3.0, -1.0), (0.0, 2.0), (0.5, 0.5), (-1.5, 0.0)]
    signal = 7.0 + 0.4 * (times - times.mean()) + sum(c * np.cos(h * omega * times) + s * np.sin(h * omega * times)
                                                     for h, (c, s) in enumerate(amplitudes, start=1))
    mean, slope, rms = stroke_parts(times, signal, PERIOD_S, HARMONICS)
    # the harmonics' RMS by Parseval: sum over the harmonics of (c^2 + s^2) / 2
    assert np.allclose([mean, slope, rms], [7.0, 0.4, np.sqrt(sum(c * c + s * s for c, s in amplitudes) / 2.0)])


def test_white_noise_puts_2h_times_the_means_variance_in_the_harmonics():
    """The criterion's noise of the harmonics, sigma sqrt(2 H), for a flat spectrum: over many strokes of white
    noise, a stroke's harmonics' mean square is 2 H times the scatter of its mean (each of a harmonic's cosine and
    sine coefficients, 2/N sum x cos, has twice the variance of the mean, (1/N) sum x)."""
    strokes, per_stroke, sample_std = 400, round(PERIOD_S * RATE_HZ), 1e-3
    times = np.arange(strokes * per_stroke) / RATE_HZ
    noise = np.random.default_rng(7).normal(0.0, sample_std, times.size)
    sigma, counted = stroke_noise(times, noise, times, times, (times[0], times[-1]), _Table())
    assert counted == strokes
    # the mean of N samples: sample_std / sqrt(N); 400 strokes estimate it within 1/sqrt(2 * 399) = 3.5 % (1 sd)
    assert abs(sigma / (sample_std / np.sqrt(per_stroke)) - 1.0) < 0.15
    # each stroke's harmonics as the phase table's Fourier cut takes them: c_h = 2/N sum x cos(h w t), s_h likewise
    phase = 2.0 * np.pi / PERIOD_S * np.outer(np.arange(1, HARMONICS + 1), times[:per_stroke])       # (H, N)
    strokes_noise = noise.reshape(strokes, per_stroke)
    c, s = (2.0 / per_stroke * strokes_noise @ np.cos(phase).T, 2.0 / per_stroke * strokes_noise @ np.sin(phase).T)
    harmonics_ms = np.mean(np.sum(c * c + s * s, axis=1) / 2.0)
    # a chi-square of 2 H = 8 degrees of freedom per stroke (relative sd 0.5), averaged over 400: within 2.5 % (1 sd)
    assert abs(harmonics_ms / (2 * HARMONICS * sigma ** 2) - 1.0) < 0.15


def _resolved_component(distances: dict, whole_ratio: float) -> dict:
    """A closed_loop.json component, resolvable on its stroke harmonics and fed back, with these distances from the
    truth."""
    part = {"signal": 23.4e-6, "noise": 5.4e-6, "motion_rms": 8.2e-6, "fed": True}
    return {"ratio": whole_ratio, "distances": distances,
            "resolvability": {"channel": "fx", "unit": "N", "dominant": "harmonics", "gravity_mismatch": 0.0,
                              "resolvable": True, "parts": {"mean": part | {"fed": False}, "harmonics": part}}}


def test_the_loop_is_judged_on_the_part_it_feeds_not_on_the_drift_it_leaves():
    """docs/closed-loop.md, "The drift the loop leaves": the closed loop takes the stroke harmonics of the truth's
    departure 0.8 of the way and drifts (a noisy stroke mean it does not feed) by more than the whole departure. The
    whole RMS puts it farther from the truth than the open loop; in the harmonics it is 0.2 of the open loop's
    distance, and the verdict, which judges the part that decides, says it follows, with both figures."""
    from hil.experiment.closed_loop import entry_follows, part_distances, verdict

    times = np.arange(3000) / RATE_HZ + 2.3                 # 15 strokes, s
    omega = 2.0 * np.pi / PERIOD_S
    periodic = 8e-6 * np.sin(omega * times) + 3e-6 * np.cos(3.0 * omega * times)          # the departure, m/s
    drift = 2.5e-5 * (times - times[0])                     # the loop's unfed drift, m/s (ramp 1.0e-5 m/s RMS)
    open_error, closed_error = -periodic, -0.2 * periodic + drift            # each run minus the truth
    distances = part_distances(times, closed_error, open_error, PERIOD_S, HARMONICS)
    assert abs(distances["harmonics"]["ratio"] - 0.2) < 1e-9
    assert abs(distances["mean"]["closed"] - 2.5e-5 * (times[-1] - times[0]) / np.sqrt(12.0)) < 1e-12
    assert distances["mean"]["open"] < 1e-15 and distances["mean"]["ratio"] > 1e6
    rms = lambda x: float(np.sqrt(np.mean(x * x)))  # noqa: E731 - one-line local
    whole = rms(closed_error) / rms(open_error)
    assert whole > 1.5
    entry = _resolved_component(distances, whole)
    assert entry_follows(entry)
    assert verdict(entry).startswith("follows the truth (the stroke harmonics of fx: ")
    assert (f"from the truth, closed over open: 0.200 in the stroke harmonics, {whole:.3f} over the whole motion"
            in verdict(entry))
    # nearer by the whole RMS, farther in the part that decides: does not follow
    farther = _resolved_component(distances | {"harmonics": distances["harmonics"] | {"ratio": 1.2}}, 0.8)
    assert not entry_follows(farther) and verdict(farther).startswith("does not follow (the stroke harmonics of fx: ")
