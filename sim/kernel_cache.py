"""numba's on-disk kernels kept in step with their sources: a kernel compiled from an older source is deleted
before any kernel module loads from the cache. The kernel modules (sim/dynamics.py, sim/fused.py, sim/aero.py,
sim/hydro.py) call :func:`discard_stale_kernels` at import; sim/warmup.py, which compiles them, imports them, so
this lives apart from both.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

#: Sources whose compiled code ends up inside the kernels (a kernel inlines the kernels it calls from other files,
#: and the module constants it reads).
KERNEL_SOURCES = ("spatial.py", "dynamics.py", "aero.py", "hydro.py", "fused.py", "integrators.py", "model.py",
                  "plugins.py", "laws.py", "flexible_kernels.py", "dense_loops.py")
#: The Cosserat rod's kernels (sim/cosserat/kernels.py, the passive rod's sim/cosserat/passive_kernels.py and the
#: strain laws compiled into them, sim/cosserat/laws/*.py) are a group of their own, cached in these folders
#: (relative to sim/) and stamped in the first.
COSSERAT_CACHE_DIRS = ("cosserat/__pycache__", "cosserat/laws/__pycache__")
#: Written next to numba's cache files: the hash of KERNEL_SOURCES and the numba version they were compiled with.
STAMP_NAME = "kernels.stamp"
_checked = False
_checked_cosserat = False


def _sources_hash(paths) -> str:
    import numba

    digest = hashlib.sha256(numba.__version__.encode())
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def kernel_sources_hash() -> str:
    return _sources_hash(Path(__file__).parent / name for name in KERNEL_SOURCES)


def cosserat_sources() -> list[Path]:
    """The sources of the Cosserat kernel group (a new law file joins it by being in sim/cosserat/laws/)."""
    root = Path(__file__).parent / "cosserat"
    return [root / "kernels.py", root / "passive_kernels.py", *sorted((root / "laws").glob("*.py")),
            Path(__file__).parent / "dense_loops.py"]


def discard_stale_kernels(cache_dir: Path | None = None) -> bool:
    """Delete the on-disk kernels compiled from other sources than the current ones; returns whether it did.

    numba keys a kernel's cache on its own file only: after an edit of sim/dynamics.py, the cached fused step
    (sim/fused.py), which has the old recursions compiled into it, would still load. The kernel modules call this
    at import (once per process, ~1 ms); without a writable cache directory (then numba keeps no cache there
    either) it does nothing."""
    global _checked
    if _checked and cache_dir is None:
        return False
    _checked = True
    if os.environ.get("NUMBA_CACHE_DIR"):
        return False            # numba's own location rules there; `python -m sim.warmup` after an update
    return _discard_stale([cache_dir or Path(__file__).parent / "__pycache__"], kernel_sources_hash())


def discard_stale_cosserat_kernels() -> bool:
    """:func:`discard_stale_kernels` for the Cosserat group (sim/cosserat/laws/__init__.py calls it at import)."""
    global _checked_cosserat
    if _checked_cosserat or os.environ.get("NUMBA_CACHE_DIR"):
        return False
    _checked_cosserat = True
    root = Path(__file__).parent
    return _discard_stale([root / d for d in COSSERAT_CACHE_DIRS], _sources_hash(cosserat_sources()))


def _discard_stale(directories: list[Path], current: str) -> bool:
    """Delete numba's cache files in ``directories`` unless the stamp in the first holds ``current``."""
    stamp = directories[0] / STAMP_NAME
    try:
        if stamp.read_text() == current:
            return False
    except OSError:
        pass
    try:
        stale = []
        for directory in directories:
            directory.mkdir(exist_ok=True)
            stale += [p for p in directory.iterdir() if p.suffix in (".nbi", ".nbc")]
        for path in stale:
            path.unlink(missing_ok=True)
        temporary = directories[0] / f"{STAMP_NAME}.{os.getpid()}"
        temporary.write_text(current)
        temporary.replace(stamp)
    except OSError:
        return False
    return bool(stale)
