"""Signal comparison, measured against simulated: pure functions on arrays (no files, no plots).

Method (docs/validation.md):

1. Both signals are on the recorded wall clock (s from the recording origin) and are resampled by linear
   interpolation onto one uniform grid over their overlap (:func:`common_grid`, :func:`resample`).
2. The cycle frequency ``f`` (stroke / tail-beat) is given or taken as the dominant frequency of the simulated
   signal: peak of the Hann-windowed, zero-padded periodogram refined by quadratic interpolation of the
   log-magnitude around the peak bin (J. O. Smith, *Spectral Audio Signal Processing*, "Quadratic
   Interpolation of Spectral Peaks") — :func:`dominant_frequency`.
3. The remaining clock offset / latency is the lag that maximises the (Hann-tapered, fixed-window)
   cross-correlation of the de-meaned signals within ``|lag| <= max_lag`` (half a period by default, so a
   periodic signal's lag is found modulo one period), refined to a fraction of a sample by a parabola through
   the peak (Jacobsen & Kootsookos, "Fast, accurate frequency estimators", IEEE SP Magazine 2007, for the
   3-point parabola) — :func:`xcorr_lag`.
4. Phase lag in degrees of the cycle = ``360 f tau`` with ``tau`` the cross-correlation lag. Amplitude ratio =
   ratio of the channel's main harmonic (the Fourier coefficient at the simulated signal's dominant frequency
   over a whole number of its cycles, i.e. a frequency response's gain); its phase difference is reported too.
   For ``m(t) = k s(t - tau)``: ratio = k, phase lag = 360 f tau.
5. Phase averaging (ensemble average over cycles, as in cycle-averaged flapping-wing force data): the phase
   ``((t - t0) f) mod 1`` is binned and each bin's mean and standard deviation are taken (:func:`phase_average`).

Error metrics on the clock-aligned grid (what the rig really did against the simulation): RMSE, RMSE normalised
by the simulated peak-to-peak range, R^2 = 1 - SS_res / SS_tot about the measured mean. After removing the
cross-correlation lag: the least-squares gain and bias ``m ~ gain s + bias`` and the RMS of what they leave,
which estimates the measurement noise when the model is right.

A channel whose expected signal varies by at most NO_PREDICTION_FRACTION of the measured one's has no prediction
for the relative metrics to test (:func:`no_prediction`): it is judged by the RMS error on the measured samples,
in its unit, instead (``rmse_samples``: no lag removed, the measurement not interpolated).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
from scipy import fft as sp_fft
from scipy.fft import next_fast_len

#: zero-padding factor of the periodogram used by :func:`dominant_frequency` (short records) ...
ZERO_PAD = 8
#: ... up to this FFT length (long records have fine enough bins without padding)
MAX_PADDED_FFT = 1 << 18
#: frequencies below this many cycles over the record are not candidates for the dominant frequency
MIN_CYCLES_IN_RECORD = 2.0
#: default grid resolution when the cycle frequency is known: samples per cycle (the grid is never finer than
#: the slower of the two signals)
GRID_SAMPLES_PER_CYCLE = 200
#: a denominator below this fraction of the signal scale is treated as zero (flat signal)
FLAT_SIGNAL_FRACTION = 1e-12
#: a channel whose expected signal varies (standard deviation) by at most this fraction of the measured one's has
#: no prediction to compare shapes with (e.g. a side force or roll moment that the model's symmetry makes zero):
#: the prediction then accounts for at most 1 % (the fraction squared) of the measured variance, so nrmse (divided
#: by the expected range), R^2 and the amplitude ratio would measure the rig's noise and disturbances against a
#: near-zero denominator. Such a channel is judged by the absolute RMS error instead (:func:`no_prediction`).
NO_PREDICTION_FRACTION = 0.1


def median_rate(t: np.ndarray) -> float:
    """Median sample rate (Hz) of the sample times ``t`` (n,) s."""
    dt = np.diff(t)
    dt = dt[dt > 0]
    if len(dt) == 0:
        raise ValueError("need at least two distinct sample times")
    return float(1.0 / np.median(dt))


def grid_rate(rate_sim_hz: float, rate_meas_hz: float, frequency_hz: float | None) -> float:
    """The default grid rate (Hz) of :func:`compare` for signals sampled at the median rates ``rate_sim_hz`` and
    ``rate_meas_hz``: the lower one, and at most GRID_SAMPLES_PER_CYCLE per cycle of ``frequency_hz`` if known."""
    rate = min(rate_sim_hz, rate_meas_hz)
    return rate if frequency_hz is None else min(rate, GRID_SAMPLES_PER_CYCLE * frequency_hz)


def common_grid(t_a: np.ndarray, t_b: np.ndarray, rate_hz: float, skip_s: float = 0.0,
                window: tuple[float, float] | None = None) -> np.ndarray:
    """Uniform times (m,) s at ``rate_hz`` over the overlap of ``t_a`` and ``t_b`` (both (n,) s, sorted),
    starting ``skip_s`` after the overlap begins (start-up transient left out), inside ``window`` (s) if given
    (the run's healthy window, hil/validation/health.py)."""
    start = max(t_a[0], t_b[0]) + skip_s
    stop = min(t_a[-1], t_b[-1])
    if window is not None:
        start, stop = max(start, window[0]), min(stop, window[1])
    if stop <= start:
        raise ValueError(f"the signals do not overlap in time (after skipping {skip_s} s"
                         + (f", inside the window {window[0]:.3f}-{window[1]:.3f} s)" if window else ")"))
    return grid_times(start, int(np.floor((stop - start) * rate_hz)) + 1, rate_hz)


def grid_times(start: float, n: int, rate_hz: float) -> np.ndarray:
    """The uniform grid (n,) s from ``start`` at ``rate_hz`` (the same numbers for the same arguments: what is
    computed on a grid once is reused for every channel compared on it)."""
    return start + np.arange(n) / rate_hz


def resample(t_src: np.ndarray, x_src: np.ndarray, t_new: np.ndarray) -> np.ndarray:
    """Linear interpolation of samples ``x_src`` (n,) at ``t_src`` (n,) s onto ``t_new`` (m,) s; NaN samples
    are dropped first and times must be sorted (duplicate times keep their first sample)."""
    return np.interp(t_new, *interpolation_source(t_src, x_src))


def interpolation_source(t_src: np.ndarray, x_src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The samples :func:`resample` interpolates between: finite, at strictly increasing times (the first of
    equal times kept); ValueError when fewer than two."""
    keep = np.isfinite(x_src) & np.isfinite(t_src)
    if not keep.all():
        t_src, x_src = t_src[keep], x_src[keep]
    if len(t_src) < 2:
        raise ValueError("need at least two finite samples to resample")
    increasing = np.diff(t_src) > 0
    if not increasing.all():   # out of order or repeated times (rare): sort, keep the first of equal times
        order = np.argsort(t_src, kind="stable")
        t_src, x_src = t_src[order], x_src[order]
        unique = np.concatenate([[True], np.diff(t_src) > 0])
        t_src, x_src = t_src[unique], x_src[unique]
    return t_src, x_src


@lru_cache(maxsize=8)
def _hann(n: int) -> np.ndarray:
    """Hann window (n,), cached: every channel of a run has the same grid length."""
    window = np.hanning(n)
    window.flags.writeable = False
    return window


def _next_pow2(n: int) -> int:
    return 1 << int(np.ceil(np.log2(max(n, 1))))


def _parabolic_offset(y_left: float, y_peak: float, y_right: float) -> float:
    """Vertex of the parabola through three equally spaced points, in samples from the middle one (-0.5..0.5)."""
    denominator = y_left - 2.0 * y_peak + y_right
    if denominator >= 0 or not np.isfinite(denominator):
        return 0.0
    return float(np.clip(0.5 * (y_left - y_right) / denominator, -0.5, 0.5))


def dominant_frequency(x: np.ndarray, rate_hz: float, f_min: float | None = None) -> float:
    """Frequency (Hz) of the largest spectral peak of ``x`` (n,) sampled at ``rate_hz``, above ``f_min``
    (default: two cycles over the record). Quadratic interpolation of the log magnitude (Smith, SASP)."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    if n < 8:
        raise ValueError("need at least 8 samples for a spectrum")
    window = _hann(n)
    n_fft = max(next_fast_len(n, real=True), min(_next_pow2(n * ZERO_PAD), MAX_PADDED_FFT))
    magnitude = np.abs(sp_fft.rfft((x - x.mean()) * window, n_fft))
    frequencies = np.fft.rfftfreq(n_fft, 1.0 / rate_hz)
    f_min = MIN_CYCLES_IN_RECORD * rate_hz / n if f_min is None else f_min
    candidates = np.nonzero(frequencies >= f_min)[0]
    if len(candidates) == 0:
        raise ValueError("record too short for the requested minimum frequency")
    peak = candidates[np.argmax(magnitude[candidates])]
    if magnitude[peak] == 0:
        return float("nan")
    if 0 < peak < len(magnitude) - 1:
        log_mag = np.log(magnitude[peak - 1:peak + 2] + np.finfo(float).tiny)
        peak = peak + _parabolic_offset(*log_mag)
    return float(peak * rate_hz / n_fft)


def xcorr_lag(reference: np.ndarray, signal: np.ndarray, rate_hz: float, max_lag_s: float) -> float:
    """Lag (s) of ``signal`` behind ``reference`` (both (n,) on the same grid): positive when ``signal`` is
    later. Peak of ``c[k] = sum_i w[i] a[i] b[i + k]`` for ``|k| <= K`` (K = ``max_lag_s`` in samples), with ``a``,
    ``b`` the de-meaned signals and ``w`` a Hann taper over the fixed window ``K <= i < n - K`` (every lag sums
    the same reference samples, and the taper removes the partial-cycle end effect that would bias the peak of
    a slow periodic signal), refined by a parabola through the peak and its neighbours."""
    a = np.asarray(reference, dtype=float) - np.mean(reference)
    b = np.asarray(signal, dtype=float) - np.mean(signal)
    n = len(a)
    max_lag = int(min(np.floor(max_lag_s * rate_hz), (n - 8) // 2))
    if max_lag < 1:
        return 0.0
    weighted = np.zeros(n)
    weighted[max_lag:n - max_lag] = a[max_lag:n - max_lag] * _hann(n - 2 * max_lag)
    n_fft = next_fast_len(n + max_lag + 1, real=True)   # lags up to max_lag do not wrap around
    correlation = sp_fft.irfft(sp_fft.rfft(b, n_fft) * np.conj(sp_fft.rfft(weighted, n_fft)), n_fft)
    lags = np.arange(-max_lag, max_lag + 1)
    values = correlation[lags % n_fft]
    best = int(np.argmax(values))
    offset = 0.0
    if 0 < best < len(values) - 1:
        offset = _parabolic_offset(values[best - 1], values[best], values[best + 1])
    return float((lags[best] + offset) / rate_hz)


def whole_cycles(t: np.ndarray, frequency_hz: float) -> np.ndarray:
    """Boolean mask (n,) of the samples of ``t`` (n,) s inside the largest whole number of cycles from t[0]."""
    cycles = np.floor((t[-1] - t[0]) * frequency_hz)
    if cycles < 1:
        return np.ones(len(t), dtype=bool)
    return (t - t[0]) < cycles / frequency_hz


def fundamental(t: np.ndarray, x: np.ndarray, frequency_hz: float) -> complex:
    """Complex amplitude of the component of ``x`` (n,) at ``frequency_hz`` over whole cycles of uniform
    ``t`` (n,) s: ``x(t) ~ mean + Re(A exp(i 2 pi f t))`` gives ``A`` (|A| the amplitude, angle the phase)."""
    return fundamentals(t, [x], frequency_hz)[0]


def fundamentals(t: np.ndarray, signals: list[np.ndarray], frequency_hz: float) -> list[complex]:
    """:func:`fundamental` of several signals (each (n,)) on the same ``t``, sharing the phasor."""
    return _fundamentals(_phasor(t, frequency_hz), signals)


def _phasor(t: np.ndarray, frequency_hz: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The samples of ``t`` (n,) s inside whole cycles (mask (n,)) and cos, sin of ``2 pi f t`` on them."""
    mask = whole_cycles(t, frequency_hz)
    angle = (2.0 * np.pi * frequency_hz) * t[mask]
    return mask, np.cos(angle), np.sin(angle)


def _read_only(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The arrays, made read-only (they are cached and shared by every channel on a grid)."""
    for array in arrays:
        array.flags.writeable = False
    return arrays


def _fundamentals(phasor: tuple[np.ndarray, np.ndarray, np.ndarray], signals: list[np.ndarray]) -> list[complex]:
    mask, cos, sin = phasor
    out = []
    for x in signals:
        xm = x[mask] - np.mean(x[mask])
        out.append(complex(2.0 * inner(xm, cos) / len(xm), -2.0 * inner(xm, sin) / len(xm)))
    return out


def inner(a: np.ndarray, b: np.ndarray) -> float:
    """The sum of the products of ``a`` and ``b`` (both (n,)) by numpy's pairwise summation, in this thread: the
    same number on every machine. (BLAS's dot splits the sum over its threads, so its last bits depend on the
    number of cores, and under load its threads cost three times the CPU, beside the processes that already
    compare channels in parallel.)"""
    return float(np.add.reduce(a * b))


def wrap_degrees(angle: float) -> float:
    """Angle in degrees wrapped into (-180, 180]."""
    wrapped = (angle + 180.0) % 360.0 - 180.0
    return 180.0 if wrapped == -180.0 else float(wrapped)


@dataclass
class PhaseAverage:
    """Cycle-averaged signal: ``phase`` (bins,) bin centres in [0, 1) of the cycle; ``mean`` and ``std``
    (bins,) in the signal's unit; ``count`` (bins,) samples per bin; ``cycles`` covered."""
    phase: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    count: np.ndarray
    cycles: float


def phase_average(t: np.ndarray, x: np.ndarray, frequency_hz: float, t0: float, bins: int) -> PhaseAverage:
    """Ensemble average of ``x`` (n,) over cycles of ``frequency_hz`` starting at ``t0`` (s), in ``bins``
    phase bins. Empty bins are NaN."""
    return _phase_average(_phase_bins(t, frequency_hz, t0, bins), x, bins, float((t[-1] - t[0]) * frequency_hz))


def _phase_bins(t: np.ndarray, frequency_hz: float, t0: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """The phase bin of each sample of ``t`` (n,) s and the samples per bin (bins,)."""
    phase = np.mod((t - t0) * frequency_hz, 1.0)
    index = np.minimum((phase * bins).astype(np.int64), bins - 1)
    return _read_only(index, np.bincount(index, minlength=bins).astype(float))


@lru_cache(maxsize=8)
def _grid_phase_bins(start: float, n: int, rate_hz: float, frequency_hz: float, bins: int) -> tuple[np.ndarray, ...]:
    """:func:`_phase_bins` of the grid :func:`grid_times` ``(start, n, rate_hz)`` from its start, once per grid."""
    return _phase_bins(grid_times(start, n, rate_hz), frequency_hz, start, bins)


def _phase_average(phase_bins: tuple[np.ndarray, np.ndarray], x: np.ndarray, bins: int,
                   cycles: float) -> PhaseAverage:
    index, count = phase_bins
    total = np.bincount(index, weights=x, minlength=bins)
    total_sq = np.bincount(index, weights=x * x, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / count
        variance = np.maximum(total_sq / count - mean * mean, 0.0)
    return PhaseAverage(phase=(np.arange(bins) + 0.5) / bins, mean=mean, std=np.sqrt(variance), count=count.copy(),
                        cycles=cycles)


def cycle_rms_error(t: np.ndarray, error: np.ndarray, frequency_hz: float, t0: float) -> tuple[np.ndarray,
                                                                                                np.ndarray]:
    """RMS of ``error`` (n,) per cycle: cycle start times (k,) s and RMS values (k,) in the signal's unit."""
    cycle = np.floor((t - t0) * frequency_hz).astype(np.int64)
    cycle -= cycle.min()
    count = np.bincount(cycle).astype(float)
    sum_sq = np.bincount(cycle, weights=error * error)
    present = count > 0
    starts = t0 + (np.nonzero(present)[0] + np.floor((t[0] - t0) * frequency_hz)) / frequency_hz
    return starts, np.sqrt(sum_sq[present] / count[present])


@dataclass
class ChannelMetrics:
    """Comparison of one measured channel with its simulated counterpart (units: the channel's, s, Hz, deg)."""
    rmse: float                 # RMS of measured - simulated on the clock-aligned grid
    nrmse: float                # rmse / peak-to-peak of the simulated signal
    r2: float                   # 1 - SS_res / SS_tot (about the measured mean)
    amplitude_ratio: float      # |A_meas| / |A_sim| at the channel's main harmonic (simulated dominant frequency)
    phase_lag_deg: float        # 360 f lag_s wrapped to (-180, 180]: degrees of the cycle; > 0: measured late
    phase_lag_harmonic_deg: float  # arg A_sim - arg A_meas at the main harmonic, (-180, 180]
    lag_s: float                # cross-correlation lag of measured behind simulated, s
    rmse_aligned: float         # RMSE after removing lag_s (on the measured samples)
    gain: float                 # least-squares m(t) ~ gain * s(t - lag) + bias, on the measured samples
    bias: float
    residual_rms: float         # RMS of m(t) - (gain s(t - lag) + bias): noise and unmodelled dynamics
    frequency_hz: float         # cycle frequency used for phase averaging and the fundamentals
    dominant_frequency_simulated_hz: float
    dominant_frequency_measured_hz: float
    amplitude_simulated: float  # |A| at the main harmonic
    amplitude_measured: float
    mean_simulated: float
    mean_measured: float
    peak_to_peak_simulated: float
    peak_to_peak_measured: float
    cycles: float
    samples: int
    # on the measured samples themselves, no lag removed (interpolating the measurement onto the grid would average
    # its noise away): standard deviations (RMS about the mean) and RMS of measured - simulated
    std_simulated: float
    std_measured: float
    rmse_samples: float

    def as_dict(self) -> dict[str, float]:
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in asdict(self).items()}


@dataclass
class Comparison:
    """Everything computed for one channel, for the report: metrics and the arrays behind the plots."""
    metrics: ChannelMetrics
    t: np.ndarray                # (m,) s grid
    simulated: np.ndarray        # (m,) on the grid
    measured: np.ndarray         # (m,) on the grid, clock-aligned
    phase_simulated: PhaseAverage
    phase_measured: PhaseAverage
    cycle_starts: np.ndarray     # (k,) s
    cycle_rms_error: np.ndarray  # (k,) RMS error per cycle


def compare(t_sim: np.ndarray, x_sim: np.ndarray, t_meas: np.ndarray, x_meas: np.ndarray, *,
            grid_hz: float | None = None, frequency_hz: float | None = None, max_lag_s: float | None = None,
            phase_bins: int = 50, skip_s: float = 0.0, window: tuple[float, float] | None = None) -> Comparison:
    """Compare measured ``x_meas`` at ``t_meas`` with simulated ``x_sim`` at ``t_sim`` (all (n,), times in s
    on one clock, values in one unit). Defaults: grid at the lower of the two median rates (at most
    GRID_SAMPLES_PER_CYCLE per cycle when ``frequency_hz`` is given), frequency = the
    simulated signal's dominant frequency, ``max_lag_s`` = half the period of the cycle or of the channel's main
    harmonic, whichever is shorter. ``window`` (s): compare only inside it (the healthy part of a run)."""
    t_sim, x_sim = np.asarray(t_sim, float), np.asarray(x_sim, float)
    t_meas, x_meas = np.asarray(t_meas, float), np.asarray(x_meas, float)
    if grid_hz is None:
        grid_hz = grid_rate(median_rate(t_sim), median_rate(t_meas), frequency_hz)
    t = common_grid(t_sim, t_meas, grid_hz, skip_s, window)
    if len(t) < 8:
        raise ValueError("fewer than 8 common samples")
    simulated_source = interpolation_source(t_sim, x_sim)   # resampled three times below
    s = np.interp(t, *simulated_source)
    m = resample(t_meas, x_meas, t)
    f_sim = dominant_frequency(s, grid_hz)
    f_meas = dominant_frequency(m, grid_hz)
    f = frequency_hz if frequency_hz is not None else f_sim
    if not np.isfinite(f) or f <= 0:
        raise ValueError("no cycle frequency: the simulated signal is flat; give frequency_hz")
    f_harmonic = f_sim if np.isfinite(f_sim) and f_sim > 0 else f
    if max_lag_s is None:
        max_lag_s = 0.5 / max(f, f_harmonic)   # half the shortest period: the lag is unambiguous
    error = m - s
    squared_error = error ** 2   # for rmse and r2 (one pass over the grid less)
    rmse = float(np.sqrt(np.mean(squared_error)))
    ptp_sim = float(np.ptp(s))
    scale = max(ptp_sim, float(np.max(np.abs(s))), 1.0) * FLAT_SIGNAL_FRACTION
    flat = ptp_sim <= scale
    nrmse = rmse / ptp_sim if not flat else float("nan")
    # a flat simulated signal has no correlation peak: its lag is undefined (reported as such, 0 used to align)
    lag = xcorr_lag(s, m, grid_hz, max_lag_s) if not flat else float("nan")
    shift = lag if not flat else 0.0
    m_mean_grid = float(np.mean(m))
    ss_tot = float(np.sum((m - m_mean_grid) ** 2))
    r2 = 1.0 - float(np.sum(squared_error)) / ss_tot if ss_tot > 0 else float("nan")

    # Amplitude and phase of the channel's own main harmonic (a thrust or lift channel beats at twice the stroke
    # frequency); the phase lag in degrees of the stroke cycle comes from the cross-correlation lag.
    a_sim, a_meas = fundamentals(t, [s, m], f_harmonic)   # at the channel's own harmonic: not shared
    defined = abs(a_sim) > scale
    ratio = abs(a_meas) / abs(a_sim) if defined else float("nan")
    harmonic_lag = wrap_degrees(np.degrees(np.angle(a_sim) - np.angle(a_meas))) if defined else float("nan")

    # Aligned comparison on the measured samples themselves (the simulated signal, smooth, is the one
    # interpolated), so that interpolation does not average the measurement noise away.
    finite = np.isfinite(x_meas)
    t_shifted = t_meas - shift
    inside = (t_shifted >= t[0]) & (t_shifted <= t[-1]) & finite
    m_in = x_meas[inside]
    s_in = np.interp(t_shifted[inside], *simulated_source)
    s_mean, m_mean = float(np.mean(s_in)), float(np.mean(m_in))
    s_centred = s_in - s_mean
    s_var = inner(s_centred, s_centred)
    gain = inner(s_centred, m_in - m_mean) / s_var if s_var > 0 else float("nan")
    bias = m_mean - gain * s_mean
    residual = m_in - (gain * s_in + bias)
    # On the measured samples without a lag (for a channel with no prediction, where the lag means nothing).
    on_grid = (t_meas >= t[0]) & (t_meas <= t[-1]) & finite
    m_samples, s_samples = x_meas[on_grid], np.interp(t_meas[on_grid], *simulated_source)

    t0 = t[0]
    # t is grid_times(t[0], len(t), grid_hz): its phase bins are computed once for all channels on it
    bins = _grid_phase_bins(float(t0), len(t), grid_hz, float(f), phase_bins)
    cycles = float((t[-1] - t[0]) * f)
    starts, cycle_error = cycle_rms_error(t, error, f, t0)
    metrics = ChannelMetrics(
        rmse=rmse, nrmse=nrmse, r2=r2, amplitude_ratio=ratio, phase_lag_deg=wrap_degrees(360.0 * f * lag),
        phase_lag_harmonic_deg=harmonic_lag, lag_s=lag,
        rmse_aligned=float(np.sqrt(np.mean((m_in - s_in) ** 2))), gain=float(gain), bias=float(bias),
        residual_rms=float(np.sqrt(np.mean(residual ** 2))), frequency_hz=float(f),
        dominant_frequency_simulated_hz=f_sim, dominant_frequency_measured_hz=f_meas,
        amplitude_simulated=abs(a_sim), amplitude_measured=abs(a_meas),
        mean_simulated=float(np.mean(s)), mean_measured=m_mean_grid,
        peak_to_peak_simulated=ptp_sim, peak_to_peak_measured=float(np.ptp(m)),
        cycles=float((t[-1] - t[0]) * f), samples=int(len(t)),
        std_simulated=float(np.std(s_samples)), std_measured=float(np.std(m_samples)),
        rmse_samples=float(np.sqrt(np.mean((m_samples - s_samples) ** 2))))
    return Comparison(metrics=metrics, t=t, simulated=s, measured=m,
                      phase_simulated=_phase_average(bins, s, phase_bins, cycles),
                      phase_measured=_phase_average(bins, m, phase_bins, cycles),
                      cycle_starts=starts, cycle_rms_error=cycle_error)


def prediction_constant(metrics: ChannelMetrics) -> bool:
    """The expected signal is constant to rounding (standard deviation within FLAT_SIGNAL_FRACTION of its level):
    its relative metrics (nrmse, lag, amplitude ratio) have no denominator at all."""
    return metrics.std_simulated <= FLAT_SIGNAL_FRACTION * max(
        abs(metrics.mean_simulated) + metrics.peak_to_peak_simulated, 1.0)


def no_prediction(metrics: ChannelMetrics) -> str | None:
    """Why the expected signal has (nearly) nothing to compare shapes with, or None when it has: it is constant
    (:func:`prediction_constant`), or its standard deviation is at most NO_PREDICTION_FRACTION of the measured
    one's."""
    std_sim, std_meas = metrics.std_simulated, metrics.std_measured
    if prediction_constant(metrics):
        return f"no prediction (expected signal constant: std {std_sim:.3g}; measured std {std_meas:.3g})"
    if std_sim <= NO_PREDICTION_FRACTION * std_meas:
        return (f"no prediction (expected std {std_sim:.3g} <= {NO_PREDICTION_FRACTION:g} x measured std "
                f"{std_meas:.3g})")
    return None


@dataclass(frozen=True)
class Criterion:
    """One pass/fail test on a metric: ``lower <= value <= upper`` (``absolute`` compares ``|value|``)."""
    metric: str
    lower: float | None = None
    upper: float | None = None
    absolute: bool = False

    def check(self, metrics: dict[str, float | None]) -> tuple[bool, str]:
        value = metrics.get(self.metric)
        if value is None or not np.isfinite(value):
            return False, f"{self.metric} undefined"
        v = abs(value) if self.absolute else value
        label = f"|{self.metric}|" if self.absolute else self.metric
        if self.lower is not None and v < self.lower:
            return False, f"{label} = {v:.4g} < {self.lower:.4g}"
        if self.upper is not None and v > self.upper:
            return False, f"{label} = {v:.4g} > {self.upper:.4g}"
        low = f"{self.lower:.4g} <= " if self.lower is not None else ""
        high = f" <= {self.upper:.4g}" if self.upper is not None else ""
        return True, f"{low}{label} = {v:.4g}{high}"
