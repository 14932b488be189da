"""What a run shows, in sentences computed from its metrics: never a fixed sentence stating a result.

An emulated rig differs from the model on purpose (its "truth", e.g. wing roots 1.2x stiffer). Each such difference
predicts figures of the validation — a :class:`Claim` — and :func:`narrate` says, for the run at hand, whether the
measured figure agrees with the prediction within the claim's tolerance, or contradicts it. A run whose health is not
valid (hil/validation/health.py) supports no conclusion, and the narrative says that first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

#: channel metrics by measured channel name (metrics.json "channels", keyed by the element of "measured")
ChannelMetrics = Mapping[str, Mapping[str, float | None]]


@dataclass(frozen=True)
class Claim:
    """A figure the rig's truth predicts: ``metric`` of the measured channel ``channel`` should be ``predict``'s
    value within ``tolerance`` (absolute, in the metric's unit). ``because`` explains the prediction; it may use
    ``{expected}``. ``predict`` may use other figures of the same run (e.g. the servos' measured undershoot)."""
    channel: str
    metric: str
    predict: Callable[[ChannelMetrics], float]
    tolerance: float
    because: str


def channel_metrics(document: Mapping) -> dict[str, Mapping[str, float | None]]:
    """metrics.json's channels by measured channel name (``hw/telemetry:strain:root_bend_r`` -> ``root_bend_r``)."""
    return {c["measured"].split(":")[-1]: c["metrics"] for c in document["channels"] if not c.get("error")}


def check(claim: Claim, metrics: ChannelMetrics) -> tuple[bool | None, str]:
    """(holds, one line): None when the run lacks a figure the claim needs."""
    try:
        expected = claim.predict(metrics)
        measured = metrics[claim.channel][claim.metric]
    except (KeyError, TypeError, ZeroDivisionError):
        return None, f"{claim.channel} {claim.metric}: not measured in this run, the expectation cannot be checked"
    if measured is None or expected is None:
        return None, f"{claim.channel} {claim.metric}: undefined in this run, the expectation cannot be checked"
    holds = abs(measured - expected) <= claim.tolerance
    verdict = "as expected" if holds else "CONTRADICTS the expectation"
    return holds, (f"{claim.channel} {claim.metric} {measured:.3g}, expected {expected:.3g} +/- "
                   f"{claim.tolerance:.2g} ({claim.because.format(expected=expected)}): {verdict}")


def narrate(document: Mapping, claims: list[Claim], title: str) -> list[str]:
    """The lines that say what one validation (``document``: its metrics.json) shows, ``title`` naming it."""
    health = document.get("health") or {}
    lines = []
    if health.get("valid") is False:
        lines.append(f"{title}: the run is INVALID ({'; '.join(health.get('reasons', []))}): its figures support "
                     f"no conclusion about the rig")
    if not claims:
        return lines + [f"{title}: this rig states no quantitative expectation; read the metrics against its "
                        f"[emulator] section"]
    metrics = channel_metrics(document)
    results = [check(claim, metrics) for claim in claims]
    lines += [f"{title}: {text}" for _, text in results]
    held = sum(ok is True for ok, _ in results)
    contradicted = sum(ok is False for ok, _ in results)
    if contradicted:
        lines.append(f"{title}: {contradicted} of {len(claims)} expectations contradicted: the run does not show "
                     f"the mismatch the rig's truth was built with" +
                     (" (and the run is invalid)" if health.get("valid") is False else
                      "; look at the run health and the channels' figures"))
    elif held == len(claims):
        lines.append(f"{title}: all {held} expectations hold: the validation measured the mismatch the rig's "
                     f"truth was built with" + (", but the run is invalid, so this may be chance"
                                                if health.get("valid") is False else ""))
    else:
        lines.append(f"{title}: {held} of {len(claims)} expectations hold, the others could not be checked")
    return lines
