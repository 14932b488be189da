"""``mms validate``'s arguments (hil/validation/validate.py runs it), read before numpy, scipy and MCAP are
imported, so that ``--help`` and a bad argument answer at once."""
from __future__ import annotations

from hil.validation.health_criteria import HealthCriteria
from sim.cli_options import add_no_plots, add_out, add_quiet, add_rig, add_robot, recorded_or_robot

PLOT_CHOICES = ("all", "failed", "none")


def add_arguments(parser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN.mcap", help="recording(s) made by mms record")
    add_robot(parser, option="--sim", type=recorded_or_robot,
              extra=", or 'recorded' for the one in the recording: the reference is this robot re-simulated, "
                    "driven by the measured servo angles, instead of the recorded sim/* stream "
                    "(docs/validation.md)")
    parser.add_argument("--sim-cutoff", type=float, metavar="HZ", default=None,
                        help="--sim: low-pass cutoff of the measured servo angles (default: "
                             "8 x their dominant frequency)")
    parser.add_argument("--sim-warmup", type=float, metavar="S", default=None,
                        help="--sim: start-up transient dropped from the re-simulation (default 2 s)")
    parser.add_argument("--thresholds", metavar="FILE",
                        help="TOML with [validation] settings, [pass] criteria and [[pair]] mappings "
                             "(docs/validation.md); default: pairs from the rig, default criteria")
    add_rig(parser, extra=" to derive the pairs from (default: the rig stored in the recording)")
    add_out(parser, "RUN.validation/ beside the recording; sweep: sweep/ beside the first run")
    parser.add_argument("--plots", choices=PLOT_CHOICES, default="all", metavar="{all,failed}",
                        help="which channels get a figure (default: all)")
    add_no_plots(parser)
    parser.add_argument("--sweep", action="store_true",
                        help="several runs: dominant frequency vs amplitude and mean, measured and simulated")
    parser.add_argument("--channel", metavar="PAIR", help="sweep: the pair giving frequency and amplitude "
                                                          "(default: the first)")
    parser.add_argument("--mean-channel", metavar="PAIR", help="sweep: the pair whose mean is plotted "
                                                               "(e.g. the lift load cell; default: --channel)")
    parser.add_argument("--settle", type=float, metavar="S", default=None,
                        help="run health: time cut after every disturbance and at the start of every healthy window, "
                             f"s (default {HealthCriteria.settle_s:g}; [health] settle_s)")
    parser.add_argument("--min-analysed", type=float, metavar="S", default=None,
                        help="run health: the shortest healthy window that makes a run valid, s (default "
                             f"{HealthCriteria.min_analysed_s:g}; [health] min_analysed_s)")
    parser.add_argument("--whole-run", action="store_true",
                        help="compare over the whole run instead of its longest healthy window (the run health is "
                             "still assessed and reported, and an invalid run is still INVALID)")
    add_quiet(parser)

