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
                  "plugins.py", "laws.py")
#: Written next to numba's cache files: the hash of KERNEL_SOURCES and the numba version they were compiled with.
STAMP_NAME = "kernels.stamp"
_checked = False


def kernel_sources_hash() -> str:
    import numba

    digest = hashlib.sha256(numba.__version__.encode())
    for name in KERNEL_SOURCES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()


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
    directory = cache_dir or Path(__file__).parent / "__pycache__"
    stamp = directory / STAMP_NAME
    current = kernel_sources_hash()
    try:
        if stamp.read_text() == current:
            return False
    except OSError:
        pass
    try:
        directory.mkdir(exist_ok=True)
        stale = [p for p in directory.iterdir() if p.suffix in (".nbi", ".nbc")]
        for path in stale:
            path.unlink(missing_ok=True)
        temporary = directory / f"{STAMP_NAME}.{os.getpid()}"
        temporary.write_text(current)
        temporary.replace(stamp)
    except OSError:
        return False
    return bool(stale)
