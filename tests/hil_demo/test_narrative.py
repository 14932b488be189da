"""The demo's narrative (hil/validation/narrative.py) is computed from the run's numbers: figures that contradict what the rig's
truth predicts are said to contradict it, and an invalid run is said to support no conclusion."""
from __future__ import annotations

from pathlib import Path

from hil.experiment.demo import RIGS, flapper_claims

REPO = Path(__file__).resolve().parents[2]


def _document(stroke_ratio, stroke_lag, bend_ratio, bend_lag, valid=True, reasons=()):
    channel = lambda name, ratio, lag: {"measured": f"hw/telemetry:x:{name}", "error": None,   # noqa: E731
                                        "metrics": {"amplitude_ratio": ratio, "phase_lag_deg": lag}}
    return {"health": {"valid": valid, "reasons": list(reasons)},
            "channels": [channel("stroke_right", stroke_ratio, stroke_lag), channel("root_bend_r", bend_ratio, bend_lag)]}


def _claims():
    return flapper_claims(REPO / "configs/robots/flapper.toml", RIGS["flapper"].rig)


def test_the_flapper_rig_predicts_its_truths_stiffness_ratio():
    live, replay = _claims()
    stiffer = 43.2e-3 / 36e-3          # configs/rigs/flapper_rig.toml over configs/robots/flapper.toml
    metrics = {"stroke_right": {"amplitude_ratio": 0.93, "phase_lag_deg": 32.0}}
    assert live[0].predict(metrics) == 0.93 / stiffer
    assert replay[0].predict(metrics) == 1.0 / stiffer


def test_figures_that_agree_are_said_to_agree():
    live, replay = _claims()
    lines = narrate_both(_document(0.93, 32.0, 0.77, 36.0), _document(1.0, 0.0, 0.84, 2.0), live, replay)
    assert sum("as expected" in line for line in lines) == 4, lines
    assert not any("CONTRADICTS" in line for line in lines)
    assert lines[-1].startswith("replay: all 2 expectations hold")


def test_figures_that_contradict_the_expectation_are_said_to_contradict_it():
    """The cold-start run of the issue: ratio 0.146 live, 0.155 in the replay, lag 70 deg against a stroke's 39.6."""
    live, replay = _claims()
    lines = narrate_both(_document(0.93, 39.6, 0.146, 70.0), _document(1.0, 0.0, 0.155, 1.0), live, replay)
    contradictions = [line for line in lines if "CONTRADICTS the expectation" in line]
    assert len(contradictions) == 3, lines
    assert any(line.startswith("live run: root_bend_r amplitude_ratio 0.146, expected 0.775") for line in lines)
    assert any(line.startswith("replay: root_bend_r amplitude_ratio 0.155, expected 0.833") for line in lines)
    assert "live run: 2 of 2 expectations contradicted" in "\n".join(lines)
    assert not any("all 2 expectations hold" in line for line in lines)


def test_an_invalid_run_is_said_to_support_no_conclusion_first():
    live, _ = _claims()
    from hil.validation.narrative import narrate

    lines = narrate(_document(0.93, 32.0, 0.77, 36.0, valid=False, reasons=["simulator stalled 21.9 s"]), live,
                    "live run")
    assert lines[0] == ("live run: the run is INVALID (simulator stalled 21.9 s): its figures support no "
                        "conclusion about the rig")
    assert "but the run is invalid, so this may be chance" in lines[-1]


def test_a_missing_channel_cannot_be_checked_and_is_not_called_agreement():
    live, _ = _claims()
    from hil.validation.narrative import narrate

    document = _document(0.93, 32.0, 0.77, 36.0)
    document["channels"] = document["channels"][:1]
    lines = narrate(document, live, "live run")
    assert all("cannot be checked" in line for line in lines[:2]), lines
    assert lines[-1] == "live run: 0 of 2 expectations hold, the others could not be checked"


def narrate_both(live_document, replay_document, live, replay):
    from hil.validation.narrative import narrate

    return narrate(live_document, live, "live run") + narrate(replay_document, replay, "replay")
