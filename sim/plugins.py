"""The simulator's compiled extension points: force-model, motion-law and joint-law kernels registered by name
(docs/extending.md).

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
Motion laws (an actuated joint's imposed trajectory, :data:`MOTION_LAW_SIGNATURE`) and joint laws (a passive
joint's torque, :data:`JOINT_LAW_SIGNATURE`) are plug-ins the same way: a layout, a kernel registered with
``register_motion_law`` / ``register_joint_law``, and a :class:`sim.laws.MotionLaw` / :class:`sim.laws.JointLaw`
subclass naming it (``fused_kernel``) whose Python form is the same kernel (sim/laws.py holds the built-in ones).
The fused stepper (sim/fused.py) calls every registered kernel through integer switches bound to the three
registries (:class:`KernelRegistry`): a new plug-in needs no edit of the core.
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
#: The one signature of a motion-law kernel (an actuated joint's imposed motion): (t s, fpar, ipar) ->
#: (r, r_d, r_dd) (rad, rad/s, rad/s^2 or m, m/s, m/s^2).
MOTION_LAW_SIGNATURE = types.UniTuple(types.float64, 3)(types.float64, types.float64[::1], types.int64[::1])
#: The one signature of a joint-law kernel (a passive joint's torque): (t s, r, r_d, the reference motion's
#: ref_r, ref_rd, ref_rdd (sim.laws.JointLaw.reference; zeros without one), fpar, ipar) -> tau (N m or N).
JOINT_LAW_SIGNATURE = types.float64(types.float64, types.float64, types.float64, types.float64, types.float64,
                                    types.float64, types.float64[::1], types.int64[::1])
#: Slots of the compiled switches (sim/fused.py): the most force-model kernels a process can register (the
#: switch has a fixed size so that adding a plug-in compiles the switch again, not a new kind of stepper) ...
MAX_FORCE_KERNELS = 16
#: ... and the most motion-law and joint-law kernels (each).
MAX_LAW_KERNELS = 16
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
class PluginKernel:
    """A registered kernel (force model, motion law or joint law): its name, parameter layout and compiled
    kernel."""
    name: str
    layout: ParamLayout
    kernel: object
    source: str          # the file that defines the kernel (its text is part of the registry's fingerprint)


class KernelRegistry:
    """The kernels of one kind (force models, motion laws, joint laws) registered by name, each compiled with the
    kind's one signature; the fused stepper calls them through a switch of ``capacity`` slots (sim/fused.py)."""

    def __init__(self, kind: str, signature, capacity: int, inline: str = "never"):
        self.kind, self.signature, self.capacity, self.inline = kind, signature, capacity, inline
        self._entries: dict[str, PluginKernel] = {}

    def register(self, name: str, layout: ParamLayout, kernel) -> PluginKernel:
        """Register ``kernel`` (a Python function or numba dispatcher of the kind's signature; compiled here with it
        and numba's on-disk cache) under ``name``. Registering the same name from the same file again (a re-import)
        replaces it; from another file it is an error."""
        py_func = getattr(kernel, "py_func", kernel)
        source = inspect.getsourcefile(py_func)
        previous = self._entries.get(name)
        if previous is not None and previous.source != source:
            raise ValueError(f"{self.kind} {name!r} is already registered from {previous.source}")
        if previous is None and len(self._entries) >= self.capacity:
            raise ValueError(f"{self.kind} {name!r}: the registry is full ({self.capacity} kernels)")
        entry = PluginKernel(name, layout, njit(self.signature, cache=True, inline=self.inline)(py_func), source)
        self._entries[name] = entry
        return entry

    def __contains__(self, name) -> bool:
        return name in self._entries

    def __getitem__(self, name: str) -> PluginKernel:
        """The registered kernel ``name``; KeyError naming the registered ones otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"no {self.kind} {name!r}; registered: {sorted(self._entries)}") from None

    def table(self) -> tuple[list, dict[str, int], str]:
        """(kernels by slot, {name: slot}, fingerprint) of the registry now: slots in the order of the names (so they
        do not depend on the order of imports); the fingerprint names the content (names and the text of the files
        that define the kernels), so code compiled against one registry is never loaded for another
        (sim/fused.py)."""
        entries = [self._entries[name] for name in sorted(self._entries)]
        digest = hashlib.sha256(self.kind.encode())
        for entry in entries:
            digest.update(f"{entry.name}:".encode())
            digest.update(Path(entry.source).read_bytes())
        return ([entry.kernel for entry in entries], {entry.name: slot for slot, entry in enumerate(entries)},
                digest.hexdigest()[:16])


FORCE_KERNELS = KernelRegistry("force kernel", FORCE_KERNEL_SIGNATURE, MAX_FORCE_KERNELS)
#: Law kernels are small and called once per joint per evaluation: numba inlines them into the stepper (``inline``).
MOTION_LAWS = KernelRegistry("motion law", MOTION_LAW_SIGNATURE, MAX_LAW_KERNELS, inline="always")
JOINT_LAWS = KernelRegistry("joint law", JOINT_LAW_SIGNATURE, MAX_LAW_KERNELS, inline="always")


def register_force_kernel(name: str, layout: ParamLayout, kernel) -> PluginKernel:
    """Register a force-model kernel of :data:`FORCE_KERNEL_SIGNATURE` (:meth:`KernelRegistry.register`)."""
    return FORCE_KERNELS.register(name, layout, kernel)


def register_motion_law(name: str, layout: ParamLayout, kernel) -> PluginKernel:
    """Register a motion-law kernel of :data:`MOTION_LAW_SIGNATURE` (:meth:`KernelRegistry.register`)."""
    return MOTION_LAWS.register(name, layout, kernel)


def register_joint_law(name: str, layout: ParamLayout, kernel) -> PluginKernel:
    """Register a joint-law kernel of :data:`JOINT_LAW_SIGNATURE` (:meth:`KernelRegistry.register`)."""
    return JOINT_LAWS.register(name, layout, kernel)


def force_kernel(name: str) -> PluginKernel:
    """The registered force-model kernel ``name``; KeyError naming the registered ones otherwise."""
    return FORCE_KERNELS[name]


def force_kernel_table() -> tuple[list, dict[str, int], str]:
    """:meth:`KernelRegistry.table` of the force-model kernels."""
    return FORCE_KERNELS.table()


class Packed:
    """A plug-in instance whose parameters are packed for a registered kernel: the class names the kernel
    (``fused_kernel``) in its ``registry``; :meth:`pack` fills ``packed`` = (fpar, ipar) once."""
    registry: KernelRegistry
    fused_kernel: str | None = None
    #: (fpar, ipar): the parameters packed by :meth:`pack` (the kernel's last two arguments).
    packed: tuple | None = None

    def pack(self, **values) -> None:
        """Pack the parameters (by the name of each field of the kernel's layout) into ``self.packed``."""
        self.packed = self.registry[self.fused_kernel].layout.pack(**values)

    def packed_view(self, name: str) -> np.ndarray:
        """A packed field as a numpy view (a parameter; write into it to change it)."""
        return self.registry[self.fused_kernel].layout.view(*self.packed, name)

    @property
    def kernel(self):
        """The compiled kernel (a numba dispatcher, callable from Python)."""
        return self.registry[self.fused_kernel].kernel

    @classmethod
    def declares_kernel(cls) -> bool:
        """Whether this class itself names a registered kernel (a subclass that does not may compute otherwise:
        it needs its own ``fused_kernel`` or a ``fused_form()``)."""
        return "fused_kernel" in cls.__dict__ and cls.fused_kernel in cls.registry


def packed_scalar(name: str, doc: str) -> property:
    """A read-only attribute reading the packed float scalar ``name`` (the parameters live in ``packed`` only)."""
    return property(lambda self: float(self.packed_view(name)), doc=doc)
