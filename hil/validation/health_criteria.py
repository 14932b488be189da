"""The thresholds of a healthy run (hil/validation/health.py judges a run by them), apart from the judging, so
that ``mms validate``'s arguments print their defaults without numpy (hil/validation/validate_args.py)."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class HealthCriteria:
    """The thresholds of a healthy run (``[health]`` of a thresholds file; docs/validation.md)."""
    stall_gap_s: float = 0.05           # longest wall-clock gap between two states, commands or telemetry samples
    rtf_tolerance: float = 0.05         # |simulated / wall time - 1| allowed over each rtf_window_s
    rtf_window_s: float = 1.0
    late_max_s: float = 0.02            # sim/status late_max_s above this marks its window
    latency_max_deg: float = 9.0        # 90th percentile per second of the commands' delay after their state, in degrees
                                        # of the cycle (the stroke, the tail beat) ...
    latency_max_s: float = 0.005        # ... or in s when the run's cycle frequency is not known
    plant_lag_max_s: float = 0.01       # the physics plant's lag behind the wall clock
    settle_s: float = 1.0               # cut after every disturbance and at the start of every window
    min_window_s: float = 2.0
    min_analysed_s: float = 5.0
    min_fraction: float = 0.5           # of the run (first to last sim/state) covered by healthy windows

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
