"""The simulator's compiled extension point: force-model kernels registered by name (docs/extending.md).

A force model that runs compiled is one file that declares
- a :class:`ParamLayout`: the names and dimensions of its parameters, packed into two flat arrays, ``fpar``
  (float64) and ``ipar`` (int64, a header of offsets and shapes, then the integer fields), so that every
  kernel has the same signature whatever its parameters;
- its kernel, a numba function of :data:`FORCE_KERNEL_SIGNATURE`:
  ``kernel(t, g, eta, f_ext, M_added, fpar, ipar)`` that adds to ``f_ext`` (N+1, 6) and ``M_added``
  (N+1, 6, 6) from the world poses ``g`` (N+1, 4, 4) and body twists ``eta`` (N+1, 6) at time t (s), reading
  its parameters through the accessors below (``float_vector(fpar, ipar, FIELDS.volume)``);
- ``register_force_kernel(name, layout, kernel)``, at import of its module;
- a :class:`sim.forces.ForceModel` with ``fused_kernel = name`` that packs its parameters once
  (``self.pack(...)``): its Python form (``apply``) is the same kernel, called from Python.
The fused stepper (sim/fused.py) calls every registered kernel through an integer switch bound to the
registry (:func:`force_kernel_table`): a new plug-in needs no edit of the core.
"""
from __future__ import annotations

import hashlib
import inspect
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit, types

from .kernel_cache import discard_stale_kernels

discard_stale_kernels()   # before any kernel of this module is loaded from numba's cache

#: The one signature of a force-model kernel: (t s, g (N+1, 4, 4), eta (N+1, 6), f_ext (N+1, 6),
#: M_added (N+1, 6, 6), fpar (float parameters,), ipar (header + integer parameters,)) -> None.
FORCE_KERNEL_SIGNATURE = types.void(types.float64, types.float64[:, :, ::1], types.float64[:, ::1],
                                    types.float64[:, ::1], types.float64[:, :, ::1], types.float64[::1],
                                    types.int64[::1])
#: Slots of the compiled switch (sim/fused.py): the most force-model kernels a process can register (the
#: switch has a fixed size so that adding a plug-in compiles the switch again, not a new kind of stepper).
MAX_FORCE_KERNELS = 16
#: Header entries per field in ipar: offset (into fpar for a float field, into ipar for an integer one) and up to
#: three dimensions (1 where the field has fewer).
HEADER_WIDTH = 4
_MAX_NDIM = HEADER_WIDTH - 1


@dataclass(frozen=True)
class ParamLayout:
    """Named fields of a plug-in's parameters: ``floats`` and ``ints`` are ((name, ndim), ...) with ndim 0
    (scalar) to 3. ``fields`` is a namedtuple of field numbers (``layout.fields.volume``), the constants a
    kernel passes to the accessors; float fields come first, then integer ones."""
    floats: tuple = ()
    ints: tuple = ()

    def __post_init__(self):
        names = [name for name, _ in self.floats + self.ints]
        if len(set(names)) != len(names):
            raise ValueError(f"parameter layout: duplicate field names in {names}")
        for name, ndim in self.floats + self.ints:
            if not (isinstance(ndim, int) and 0 <= ndim <= _MAX_NDIM):
                raise ValueError(f"parameter layout: field {name!r} has ndim {ndim!r}, expected 0..{_MAX_NDIM}")
        object.__setattr__(self, "fields", namedtuple("Fields", names)(*range(len(names))))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.floats + self.ints]

    def pack(self, **values) -> tuple[np.ndarray, np.ndarray]:
        """(fpar, ipar) holding every field (by name, each of its declared ndim; floats finite). ValueError
        naming the field otherwise."""
        missing = sorted(set(self.names) - set(values))
        unknown = sorted(set(values) - set(self.names))
        if missing or unknown:
            raise ValueError(f"parameters: missing {missing}, unknown {unknown}; expected {self.names}")
        header = np.ones(HEADER_WIDTH * len(self.names), dtype=np.int64)
        floats, ints = [], []
        f_offset, i_offset = 0, header.size
        for number, (name, ndim) in enumerate(self.floats + self.ints):
            is_float = number < len(self.floats)
            array = np.asarray(values[name], dtype=float if is_float else np.int64)
            if array.ndim != ndim:
                raise ValueError(f"parameter {name!r}: expected {ndim} dimensions, got shape {array.shape}")
            if is_float and np.any(np.isnan(array)):
                raise ValueError(f"parameter {name!r}: NaN values")
            row = header[HEADER_WIDTH * number:HEADER_WIDTH * (number + 1)]
            row[0] = f_offset if is_float else i_offset
            row[1:1 + ndim] = array.shape
            (floats if is_float else ints).append(array.ravel())
            if is_float:
                f_offset += array.size
            else:
                i_offset += array.size
        fpar = np.concatenate(floats) if floats else np.zeros(0)
        ipar = np.concatenate([header] + ints)
        return np.ascontiguousarray(fpar, dtype=float), np.ascontiguousarray(ipar, dtype=np.int64)

    def view(self, fpar: np.ndarray, ipar: np.ndarray, name: str) -> np.ndarray:
        """The field ``name`` of packed (fpar, ipar) as a numpy view (write into it to change the parameter)."""
        number = self.names.index(name)
        ndim = (self.floats + self.ints)[number][1]
        row = ipar[HEADER_WIDTH * number:HEADER_WIDTH * (number + 1)]
        shape = tuple(int(d) for d in row[1:1 + ndim])
        source = fpar if number < len(self.floats) else ipar
        size = int(np.prod(shape))
        return source[int(row[0]):int(row[0]) + size].reshape(shape)


# ------------------------------------------------------------------------------------ kernel-side accessors
@njit(cache=True)
def float_scalar(fpar, ipar, field):
    """Float field number ``field`` (a ParamLayout.fields constant) of ndim 0."""
    return fpar[ipar[HEADER_WIDTH * field]]


@njit(cache=True)
def float_vector(fpar, ipar, field):
    """Float field of ndim 1: a view (d0,)."""
    h = HEADER_WIDTH * field
    return fpar[ipar[h]:ipar[h] + ipar[h + 1]]


@njit(cache=True)
def float_matrix(fpar, ipar, field):
    """Float field of ndim 2: a view (d0, d1)."""
    h = HEADER_WIDTH * field
    return fpar[ipar[h]:ipar[h] + ipar[h + 1] * ipar[h + 2]].reshape((ipar[h + 1], ipar[h + 2]))


@njit(cache=True)
def float_array3(fpar, ipar, field):
    """Float field of ndim 3: a view (d0, d1, d2)."""
    h = HEADER_WIDTH * field
    size = ipar[h + 1] * ipar[h + 2] * ipar[h + 3]
    return fpar[ipar[h]:ipar[h] + size].reshape((ipar[h + 1], ipar[h + 2], ipar[h + 3]))


@njit(cache=True)
def int_scalar(ipar, field):
    """Integer field of ndim 0."""
    return ipar[ipar[HEADER_WIDTH * field]]


@njit(cache=True)
def int_vector(ipar, field):
    """Integer field of ndim 1: a view (d0,)."""
    h = HEADER_WIDTH * field
    return ipar[ipar[h]:ipar[h] + ipar[h + 1]]


# ------------------------------------------------------------------------------------------------ registry
@dataclass(frozen=True)
class ForceKernel:
    """A registered force-model kernel: its name, parameter layout and compiled kernel."""
    name: str
    layout: ParamLayout
    kernel: object
    source: str          # the file that defines the kernel (its text is part of the registry's fingerprint)


_FORCE_KERNELS: dict[str, ForceKernel] = {}


def register_force_kernel(name: str, layout: ParamLayout, kernel) -> ForceKernel:
    """Register ``kernel`` (a Python function or numba dispatcher of :data:`FORCE_KERNEL_SIGNATURE`; compiled
    here with that signature and numba's on-disk cache) under ``name``. Registering the same name from the
    same file again (a re-import) replaces it; from another file it is an error."""
    py_func = getattr(kernel, "py_func", kernel)
    source = inspect.getsourcefile(py_func)
    previous = _FORCE_KERNELS.get(name)
    if previous is not None and previous.source != source:
        raise ValueError(f"force kernel {name!r} is already registered from {previous.source}")
    if previous is None and len(_FORCE_KERNELS) >= MAX_FORCE_KERNELS:
        raise ValueError(f"force kernel {name!r}: the registry is full ({MAX_FORCE_KERNELS} kernels)")
    compiled = njit(FORCE_KERNEL_SIGNATURE, cache=True)(py_func)
    entry = ForceKernel(name, layout, compiled, source)
    _FORCE_KERNELS[name] = entry
    return entry


def force_kernel(name: str) -> ForceKernel:
    """The registered kernel ``name``; KeyError naming the registered ones otherwise."""
    try:
        return _FORCE_KERNELS[name]
    except KeyError:
        raise KeyError(f"no force kernel {name!r}; registered: {sorted(_FORCE_KERNELS)}") from None


def force_kernel_table() -> tuple[list, dict[str, int], str]:
    """(kernels by slot, {name: slot}, fingerprint) of the registry now: slots in the order of the names (so they do
    not depend on the order of imports); the fingerprint names the content (names and the text of the files that
    define the kernels), so code compiled against one registry is never loaded for another (sim/fused.py)."""
    entries = [_FORCE_KERNELS[name] for name in sorted(_FORCE_KERNELS)]
    digest = hashlib.sha256()
    for entry in entries:
        digest.update(f"{entry.name}:".encode())
        digest.update(Path(entry.source).read_bytes())
    return ([entry.kernel for entry in entries], {entry.name: slot for slot, entry in enumerate(entries)},
            digest.hexdigest()[:16])
