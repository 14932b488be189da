"""Plot the passive rod's tip paths against PyElastica's (the runs of
tests/cosserat/test_passive_rod_vs_pyelastica.py): docs/cosserat-pyelastica.png.

Needs the `test` extra (PyElastica). Usage: python tools/plot_pyelastica_comparison.py [--out PATH]
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def load_comparison():
    """The test module: its runs are the figure's, so the figure shows exactly what the tests assert."""
    path = ROOT / "tests" / "cosserat" / "test_passive_rod_vs_pyelastica.py"
    sys.path.insert(0, str(ROOT))           # it imports PyElastica's side from tests/cosserat/pyelastica_rod.py
    spec = importlib.util.spec_from_file_location("pyelastica_comparison", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "cosserat-pyelastica.png",
                        help="the PNG to write (default: docs/cosserat-pyelastica.png)")
    args = parser.parse_args(argv)
    c = load_comparison()
    titles = {"gravity": "(a) horizontal cantilever released straight under gravity (-y)",
              "tip_load": "(b) 10 N tip load (-z) removed at t = 0"}
    fig, axes = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for ax, (case, axis) in zip(axes, c.CASES):
        theirs, _ = c.pyelastica_tip(case, c.ELEMENTS, c.ELEMENTS_DT)
        ours = c.our_tip(case)
        t = c.RECORD * np.arange(len(theirs))
        rms, largest = c.path_difference(ours, theirs)
        ax.plot(t, theirs[:, axis], "k-", lw=2.5, alpha=0.4, label=f"PyElastica, {c.ELEMENTS} elements")
        ax.plot(t, ours[:, axis], "C0--", lw=1.2, label=f"ours, {c.MODES} Legendre modes (bending only)")
        ax.plot(t, 10.0 * np.linalg.norm(ours - theirs, axis=1), "C3-", lw=0.8, label="10 x |tip difference| (m)")
        ax.set_ylabel(f"tip {'xyz'[axis]} (m)")
        ax.set_title(f"{titles[case]}: difference RMS {100 * rms:.2f} %, max {100 * largest:.2f} % of the peak",
                     fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time after release (s)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8)
    fig.suptitle("Passive Cosserat rod vs PyElastica 1.0: l = 1 m, r = 0.02 m, rho = 1000 kg/m^3, E = 1e8 Pa, "
                 "G = E/3", fontsize=10)
    fig.tight_layout(rect=(0.0, 0.05, 1.0, 1.0))
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
