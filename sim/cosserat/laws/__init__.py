"""Compiled strain laws of the Cosserat robots, one file per robot kind, each holding the Python law (the
reference the compiled path is tested against) beside its numba kernel.

A kernel has the signature ``kernel(params (P,), X m, t s, out (4, m))``: it writes the m actuated components
of the strain and their d/dX, d/dt, d2/dt2 at one abscissa. A :class:`CompiledLaw` names the kind (an id of
:data:`LAW_KINDS`) and packs its parameters; :func:`law_kernel` dispatches on the id (an integer switch: numba
cannot cache a kernel that receives another compiled function as an argument, sim/fused.py). Adding a law is a
file here with its kernel, an id in :data:`LAW_KINDS` and a branch in :func:`law_kernel`. An edit of any file here
or of sim/cosserat/kernels.py discards the group's cached kernels (sim/kernel_cache.py), since numba keys a cached
kernel on its own file only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from sim.kernel_cache import discard_stale_cosserat_kernels

from .constant import constant_kernel
from .earthworm import earthworm_kernel
from .inchworm import inchworm_kernel
from .legendre import legendre_kernel
from .snake import snake_kernel

discard_stale_cosserat_kernels()    # before any kernel of the group is loaded from numba's cache (at first call)

#: Registered law kinds (the id the compiled kernels switch on).
LAW_KINDS = {"constant": 0, "earthworm": 1, "inchworm": 2, "snake": 3, "legendre": 4}
CONSTANT, EARTHWORM, INCHWORM, SNAKE, LEGENDRE = (LAW_KINDS[name] for name in
                                                  ("constant", "earthworm", "inchworm", "snake", "legendre"))
#: Parameters each kind reads (None: as many as it is given; the kernels do not check bounds).
PARAMETER_COUNTS = {"constant": None, "earthworm": 4, "inchworm": 4, "snake": 8, "legendre": None}


@dataclass(frozen=True)
class CompiledLaw:
    """The compiled form of an actuation law: its kind (a :data:`LAW_KINDS` name) and packed parameters."""
    kind: str
    params: np.ndarray

    def __post_init__(self):
        if self.kind not in LAW_KINDS:
            raise ValueError(f"unknown compiled strain law {self.kind!r}; expected one of {sorted(LAW_KINDS)}")
        object.__setattr__(self, "params", np.ascontiguousarray(self.params, dtype=float))
        expected = PARAMETER_COUNTS[self.kind]
        if self.params.ndim != 1 or (expected is not None and self.params.size != expected):
            raise ValueError(f"compiled strain law {self.kind!r}: got parameters of shape {self.params.shape}, "
                             f"expected ({expected},)")

    @property
    def kind_id(self) -> int:
        return LAW_KINDS[self.kind]


@njit(cache=True)
def law_kernel(kind, params, X, t, out):
    """The law of kind id ``kind`` at abscissa X (m), time t (s): out (4, m) values, d/dX, d/dt, d2/dt2."""
    if kind == CONSTANT:
        constant_kernel(params, X, t, out)
    elif kind == EARTHWORM:
        earthworm_kernel(params, X, t, out)
    elif kind == INCHWORM:
        inchworm_kernel(params, X, t, out)
    elif kind == LEGENDRE:
        legendre_kernel(params, X, t, out)
    else:
        snake_kernel(params, X, t, out)
