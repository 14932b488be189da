"""Compile PyElastica's numba kernels once per installation, before the tests run.

    python tests/cosserat/warm_pyelastica.py

PyElastica, the test extra's independent Cosserat rod code (tests/cosserat/test_passive_rod_vs_pyelastica.py),
compiles its kernels on first use and caches them in its own install folder (numba's ``cache=True``), as
``python -m sim.warmup`` does the simulator's: on a fresh venv the first test against it paid that compile (about
25 s on the 2-core machine). `make test`'s install step runs this script beside the simulator's warm-up, where a
core is free (docs/install.md). It steps both of the test's cases (the rod under gravity; the tip load with its
damper, released) for a few steps: the kernels are compiled for the argument types, which the rod's length and
element count do not change.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

#: PyElastica steps of each case: enough for every kernel of a step (the tip load's settling and release included)
WARM_STEPS = 3
#: elements of the warmed rod (the test's 50 and 100 compile the same code)
WARM_ELEMENTS = 5


def main() -> int:
    from tests.cosserat.pyelastica_rod import CASES, ELEMENTS_DT, pyelastica_run

    start = time.perf_counter()
    for case in CASES:
        pyelastica_run(case, WARM_ELEMENTS, ELEMENTS_DT, WARM_STEPS * ELEMENTS_DT, WARM_STEPS * ELEMENTS_DT)
    print(f"PyElastica's kernels ready in {time.perf_counter() - start:.1f} s (compiled or loaded from its cache)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
