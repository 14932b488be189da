"""Model (the robot description, immutable during a run) and Data (the per-evaluation workspace).

Pinocchio's split: a :class:`Model` holds flat numpy arrays describing the tree of N+1 rigid bodies (0 = base
/ reference body, ``parent[j] < j``) and N one-DoF joints; a :class:`Data` holds everything the hybrid
algorithm (sim/dynamics.py) writes. Robots are built in code with :class:`ModelBuilder` (revolute/prismatic
joints of any axis and placement; fixed joints merged into the parent with their inertia transformed) or
from URDF (sim/urdf.py). Conventions: docs/theory/hybrid-algorithm.md.
"""
from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Any

import numpy as np

from .laws import Constant, Free, JointLaw, MotionLaw, ViscoElastic
from .spatial import spatial_inertia, transform_inertia

BASE_MODES = ("floating", "fixed", "imposed")
JOINT_TYPES = ("revolute", "prismatic")

#: Size codes of the buffer layouts below: the number of bodies N+1 and of joints n.
BODIES, JOINTS = "nb", "n"
#: Arrays of ``Data.buffer``, in order: (name, shape). The one source of that layout: :class:`Data`'s attributes
#: and the kernels' views (sim.dynamics._data_views, through :data:`DATA_DIMS`) are computed from it.
DATA_FIELDS = (("g", (BODIES, 4, 4)), ("eta", (BODIES, 6)), ("Xj", (BODIES, 4, 4)), ("AdJ", (BODIES, 6, 6)),
               ("zeta", (BODIES, 6)), ("f_ext", (BODIES, 6)), ("f_gravity", (BODIES, 6)),
               ("M_added", (BODIES, 6, 6)), ("Mstar", (BODIES, 6, 6)), ("Pistar", (BODIES, 6)), ("H", (BODIES,)),
               ("eta_d", (BODIES, 6)), ("q", (JOINTS,)), ("qd", (JOINTS,)), ("qdd", (JOINTS,)), ("tau", (JOINTS,)),
               ("base_pose", (4, 4)), ("base_twist", (6,)), ("base_acc", (6,)), ("base_wrench", (6,)))
#: Arrays of ``Model.kernel_floats``, in order (same role for sim.dynamics._model_views).
MODEL_FIELDS = (("joint_placement", (BODIES, 4, 4)), ("joint_axis", (BODIES, 6)), ("inertia", (BODIES, 6, 6)),
                ("law_k", (JOINTS,)), ("law_mu", (JOINTS,)), ("law_r0", (JOINTS,)))
#: Dimension codes of the kernels' form of a layout: a size, or one of these for N+1 and n; 1 pads to 3 axes.
DIM_BODIES, DIM_JOINTS = -1, -2


def kernel_dims(fields) -> tuple:
    """A layout (``DATA_FIELDS``, ``MODEL_FIELDS``) as the kernels read it: ((d0, d1, d2), ...) of ints, the
    size codes replaced by DIM_BODIES / DIM_JOINTS and missing axes by 1 (a constant tuple numba compiles in)."""
    codes = {BODIES: DIM_BODIES, JOINTS: DIM_JOINTS}
    return tuple(tuple(codes.get(d, d) for d in shape) + (1,) * (3 - len(shape)) for _, shape in fields)


def layout_shapes(fields, nb: int, n: int) -> list[tuple[str, tuple[int, ...]]]:
    """[(name, shape)] of a layout for N+1 = nb bodies and n joints."""
    sizes = {BODIES: nb, JOINTS: n}
    return [(name, tuple(sizes.get(d, d) for d in shape)) for name, shape in fields]


DATA_DIMS = kernel_dims(DATA_FIELDS)
MODEL_DIMS = kernel_dims(MODEL_FIELDS)
#: The kernels' views of the two buffers, one field per array of the layout, by name (sim.dynamics._data_views,
#: _model_views: ``views.f_ext``), so that no kernel matches the arrays by position.
DataViews = namedtuple("DataViews", [name for name, _ in DATA_FIELDS])
ModelViews = namedtuple("ModelViews", [name for name, _ in MODEL_FIELDS])
#: Field numbers of the two layouts by name (DATA_INDEX.f_ext), for the kernels.
DATA_INDEX = DataViews(*range(len(DATA_FIELDS)))
MODEL_INDEX = ModelViews(*range(len(MODEL_FIELDS)))

_FROZEN_ARRAYS = ("parent", "joint_placement", "joint_axis", "inertia", "actuated", "q_rest", "gravity",
                  "base_pose", "law_k", "law_mu", "law_r0")


class BaseMotion:
    """Imposed motion of the base (``base_mode = "imposed"``): ``evaluate(t) -> (pose (4, 4) world, m;
    twist (6,) = (V, Omega) in the base frame, m/s, rad/s; acceleration (6,) = d twist/dt in the base frame)``."""

    def evaluate(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError


class StaticBase(BaseMotion):
    """Base held at a constant pose (4, 4)."""

    def __init__(self, pose: np.ndarray | None = None):
        self.pose = np.eye(4) if pose is None else np.asarray(pose, dtype=float).reshape(4, 4)

    def evaluate(self, t: float):
        return self.pose, np.zeros(6), np.zeros(6)


class CallableBaseMotion(BaseMotion):
    """Base motion given by a Python function ``fn(t) -> (pose (4, 4), twist (6,), acceleration (6,))``."""

    def __init__(self, fn):
        self.fn = fn

    def evaluate(self, t: float):
        pose, twist, acc = self.fn(t)
        return (np.asarray(pose, dtype=float).reshape(4, 4), np.asarray(twist, dtype=float).reshape(6),
                np.asarray(acc, dtype=float).reshape(6))


class Model:
    """Immutable robot description (docs/sim-api.md).

    Arrays (read-only):
    - ``parent`` int (N+1,), ``parent[0] = -1``, ``parent[j] < j``;
    - ``joint_placement`` (N+1, 4, 4): ``i g j(0)``, pose of frame j in its parent frame at r = 0, m;
    - ``joint_axis`` (N+1, 6): unit twist A_j in frame j, ``(0, a)`` revolute, ``(a, 0)`` prismatic (row 0 zero);
    - ``inertia`` (N+1, 6, 6): spatial inertia M_j about O_j in frame j (kg, kg m, kg m^2);
    - ``actuated`` bool (n,), ``q_rest`` (n,) rad or m; joint k connects ``parent[k+1]`` to body ``k+1``;
    - ``gravity`` (3,) world frame, m/s^2; ``base_pose`` (4, 4) initial base pose in the world, m;
    - ``law_k, law_mu, law_r0`` (n,): viscoelastic coefficients of the passive joints whose law is a
      :class:`ViscoElastic` (zero elsewhere), evaluated in the numba kernel.
    Other attributes: ``joint_names`` (n), ``body_names`` (N+1), ``joint_types`` (n), ``base_mode``,
    ``motion_laws`` {joint index: MotionLaw} (actuated joints), ``joint_laws`` {joint index: JointLaw}
    (passive joints), ``python_laws`` [(joint index, JointLaw)] (passive laws that are not viscoelastic),
    ``force_models`` [ForceModel], ``flexible`` (None, or the modal bodies: sim.flexible.FlexibleParts, whose
    rigid inertia here is what they carry at their floating frame), ``base_motion`` (imposed base), ``frames`` {name: (body, (4, 4) pose in the
    body frame)} for every link (merged fixed links included), ``metadata`` dict.
    """

    def __init__(self, *, joint_names, body_names, parent, joint_placement, joint_axis, inertia, actuated,
                 q_rest=None, joint_types=None, base_mode="floating", gravity=(0.0, 0.0, -9.81),
                 motion_laws=None, joint_laws=None, force_models=None, base_motion=None, base_pose=None,
                 frames=None, metadata=None, flexible=None):
        parent = np.asarray(parent, dtype=np.int64).copy()
        n_bodies = parent.shape[0]
        n = n_bodies - 1
        if parent[0] != -1 or any(not (0 <= parent[j] < j) for j in range(1, n_bodies)):
            raise ValueError("parent must satisfy parent[0] = -1 and 0 <= parent[j] < j")
        if len(joint_names) != n or len(body_names) != n_bodies:
            raise ValueError(f"expected {n} joint names and {n_bodies} body names")
        if base_mode not in BASE_MODES:
            raise ValueError(f"base_mode {base_mode!r}: expected one of {BASE_MODES}")
        d = self.__dict__
        d["joint_names"] = list(joint_names)
        d["body_names"] = list(body_names)
        d["parent"] = parent
        d["joint_placement"] = _array(joint_placement, (n_bodies, 4, 4), "joint_placement")
        d["joint_axis"] = _array(joint_axis, (n_bodies, 6), "joint_axis")
        d["inertia"] = _array(inertia, (n_bodies, 6, 6), "inertia")
        d["actuated"] = np.asarray(actuated, dtype=bool).reshape(n).copy()
        d["q_rest"] = np.zeros(n) if q_rest is None else _array(q_rest, (n,), "q_rest")
        if joint_types is None:
            joint_types = ["prismatic" if np.any(self.joint_axis[k + 1, :3]) else "revolute" for k in range(n)]
        d["joint_types"] = list(joint_types)
        d["base_mode"] = base_mode
        d["_mode_code"] = BASE_MODES.index(base_mode)
        d["gravity"] = _array(gravity, (3,), "gravity")
        d["base_pose"] = np.eye(4) if base_pose is None else _array(base_pose, (4, 4), "base_pose")
        if base_mode == "imposed" and base_motion is None:
            base_motion = StaticBase(self.base_pose)
        d["base_motion"] = base_motion
        motion_laws = dict(motion_laws or {})
        joint_laws = dict(joint_laws or {})
        for k in range(n):
            if self.actuated[k]:
                motion_laws.setdefault(k, Constant(self.q_rest[k]))
            else:
                joint_laws.setdefault(k, Free())
        d["motion_laws"] = {k: v for k, v in motion_laws.items() if self.actuated[k]}
        d["joint_laws"] = {k: v for k, v in joint_laws.items() if not self.actuated[k]}
        law_k, law_mu, law_r0 = np.zeros(n), np.zeros(n), np.zeros(n)
        python_laws = []
        for k, law in self.joint_laws.items():
            if isinstance(law, ViscoElastic):
                law_k[k], law_mu[k], law_r0[k] = law.k, law.mu, law.r0
            elif isinstance(law, JointLaw):
                python_laws.append((k, law))
            else:
                raise TypeError(f"joint {self.joint_names[k]}: {law!r} is not a JointLaw")
        for k, law in self.motion_laws.items():
            if not isinstance(law, MotionLaw):
                raise TypeError(f"joint {self.joint_names[k]}: {law!r} is not a MotionLaw")
        d["law_k"], d["law_mu"], d["law_r0"] = law_k, law_mu, law_r0
        d["python_laws"] = sorted(python_laws, key=lambda item: item[0])
        d["force_models"] = list(force_models or [])
        d["frames"] = dict(frames or {name: (j, np.eye(4)) for j, name in enumerate(self.body_names)})
        d["metadata"] = dict(metadata or {})
        # Modal (flexible) bodies, a body kind of sim/flexible.py (FlexibleParts), checked against the tree there;
        # None: every body is rigid.
        if flexible is not None and not flexible.bodies:
            flexible = None
        if flexible is not None:
            flexible.check(self)
        d["flexible"] = flexible
        # The model's float arrays in one read-only buffer for the kernels (sim.dynamics._model_views).
        d["kernel_floats"] = np.concatenate([np.ravel(d[name]) for name, _ in MODEL_FIELDS])
        for name in _FROZEN_ARRAYS + ("kernel_floats",):
            d[name].setflags(write=False)

    def __setattr__(self, name, value):
        raise AttributeError("Model is immutable; use model.replace(...) to derive a modified copy")

    # ------------------------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Number of joints (= degrees of freedom of the joints)."""
        return len(self.joint_names)

    @property
    def n_bodies(self) -> int:
        """Number of bodies N+1, base included."""
        return self.parent.shape[0]

    @property
    def base_mode_code(self) -> int:
        """0 floating, 1 fixed, 2 imposed (the kernel's encoding)."""
        return BASE_MODES.index(self.base_mode)

    def joint_index(self, name: str) -> int:
        """Index of a joint in ``joint_names``; KeyError naming the known joints otherwise."""
        try:
            return self.joint_names.index(name)
        except ValueError:
            raise KeyError(f"no joint {name!r}; joints are {self.joint_names}") from None

    def total_mass(self) -> float:
        """Total rigid mass (kg), added mass excluded."""
        return float(self.inertia[:, 0, 0].sum())

    def replace(self, **changes: Any) -> "Model":
        """A new Model with some constructor arguments changed (e.g. ``gravity``, ``base_mode``,
        ``actuated``, ``motion_laws``, ``joint_laws``, ``force_models``). Joints whose mode changes without a
        new law get the defaults (actuated: held at q_rest; passive: free)."""
        args = dict(joint_names=self.joint_names, body_names=self.body_names, parent=self.parent,
                    joint_placement=self.joint_placement, joint_axis=self.joint_axis, inertia=self.inertia,
                    actuated=self.actuated, q_rest=self.q_rest, joint_types=self.joint_types,
                    base_mode=self.base_mode, gravity=self.gravity, motion_laws=self.motion_laws,
                    joint_laws=self.joint_laws, force_models=self.force_models, base_motion=self.base_motion,
                    base_pose=self.base_pose, frames=self.frames, metadata=self.metadata, flexible=self.flexible)
        if changes.get("base_mode", self.base_mode) != "imposed" and "base_motion" not in changes:
            args["base_motion"] = None
        args.update(changes)
        return Model(**args)

    def __repr__(self) -> str:
        return (f"Model({self.metadata.get('name', 'robot')!r}, bodies={self.n_bodies}, joints={self.n}, "
                f"actuated={int(self.actuated.sum())}, base={self.base_mode})")


def _array(value, shape, name) -> np.ndarray:
    out = np.array(value, dtype=float)
    if out.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {out.shape}")
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name}: non-finite values")
    return out


class Data:
    """Per-evaluation workspace of the hybrid algorithm for one Model (preallocated, reused every step).

    Written by the first forward recursion:
      ``g`` (N+1, 4, 4) world pose of each body, m; ``eta`` (N+1, 6) body twist (V, Omega) in its own frame;
      ``Xj`` (N+1, 4, 4) joint pose ``i g j(r_j)``; ``AdJ`` (N+1, 6, 6) ``Ad_{j g i}`` (parent twist -> frame j);
      ``zeta`` (N+1, 6) velocity-product acceleration ``ad_{eta_j}(A_j) r_d_j``.
    Written by the force models (zeroed before they run):
      ``f_ext`` (N+1, 6) external wrench on body j in frame j about O_j (N, N m);
      ``f_gravity`` (N+1, 6) gravity wrench from a :class:`sim.forces.Gravity` plug-in (same frame);
      ``M_added`` (N+1, 6, 6) added-mass inertia in frame j about O_j.
    Written by the recursions:
      ``Mstar`` (N+1, 6, 6) articulated inertia M*_j, ``Pistar`` (N+1, 6) Pi*_j, ``H`` (N+1,), ``eta_d``
      (N+1, 6) body accelerations (time derivative of the body twist, own frame); results ``qdd`` (n,),
      ``tau`` (n,) (complete: actuated torques computed, passive torques applied), ``base_acc`` (6,),
      ``base_wrench`` (6,) wrench of the support on the base (base frame; zero for a floating base).
    Inputs of the last evaluation: ``q``, ``qd`` (n,), ``t`` (s), ``base_pose`` (4, 4), ``base_twist`` (6,).
    All arrays are views into one flat ``buffer`` (see :func:`data_layout`): write into them, never rebind them.
    """

    def __init__(self, model: Model):
        nb, n = model.n_bodies, model.n
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "t", 0.0)
        # One flat buffer (so the numba kernels take one argument instead of twenty); the attributes are views.
        sizes = [int(np.prod(shape)) for _, shape in data_layout(nb, n)]
        buffer = np.zeros(sum(sizes))
        object.__setattr__(self, "buffer", buffer)
        offset = 0
        for (name, shape), size in zip(data_layout(nb, n), sizes):
            object.__setattr__(self, name, buffer[offset:offset + size].reshape(shape))
            offset += size
        self.base_pose[:] = np.eye(4)

    def __setattr__(self, name, value):
        current = self.__dict__.get(name)
        if isinstance(current, np.ndarray) and value is not current:
            raise AttributeError(f"Data.{name} is a view into the kernel buffer: write into it "
                                 f"(data.{name}[...] = ...), do not rebind it")
        object.__setattr__(self, name, value)


def data_layout(nb: int, n: int) -> list[tuple[str, tuple[int, ...]]]:
    """Order and shapes of the arrays in ``Data.buffer`` (:data:`DATA_FIELDS` for nb bodies and n joints)."""
    return layout_shapes(DATA_FIELDS, nb, n)


@dataclass
class _Link:
    body: int          # index of the (merged) body this link belongs to
    pose: np.ndarray   # (4, 4) pose of the link frame in the body frame, m


class ModelBuilder:
    """Build a :class:`Model` in code, body by body (parents first).

    >>> b = ModelBuilder("torso", base_inertia=spatial_inertia(1.0, [0, 0, 0], np.eye(3) * 1e-3))
    >>> b.add_body("arm", parent="torso", joint_name="shoulder", joint_type="revolute", axis=[0, 0, 1],
    ...            placement=pose(p=[0.1, 0, 0]), inertia=spatial_inertia(0.2, [0.05, 0, 0], np.eye(3) * 1e-4))
    >>> model = b.build()

    ``joint_type="fixed"`` merges the new link into its parent's body (inertia transformed, the link name
    stays usable as a parent and appears in ``model.frames``).
    """

    def __init__(self, base_name: str = "base", base_inertia=None, *, base_mode: str = "floating",
                 gravity=(0.0, 0.0, -9.81), base_pose=None, base_motion=None):
        self._body_names = [base_name]
        self._parent = [-1]
        self._placement = [np.eye(4)]
        self._axis = [np.zeros(6)]
        self._inertia = [np.zeros((6, 6)) if base_inertia is None else np.array(base_inertia, dtype=float)]
        self._joint_names: list[str] = []
        self._joint_types: list[str] = []
        self._actuated: list[bool] = []
        self._q_rest: list[float] = []
        self._motion_laws: dict[int, MotionLaw] = {}
        self._joint_laws: dict[int, JointLaw] = {}
        self._links = {base_name: _Link(0, np.eye(4))}
        self.force_models: list = []
        self.base_mode = base_mode
        self.gravity = np.asarray(gravity, dtype=float)
        self.base_pose = base_pose
        self.base_motion = base_motion

    def has_link(self, name: str) -> bool:
        return name in self._links

    def add_body(self, name: str, parent: str, *, joint_name: str | None = None, joint_type: str = "revolute",
                 axis=(0.0, 0.0, 1.0), placement=None, inertia=None, actuated: bool = False,
                 q_rest: float = 0.0, motion_law: MotionLaw | None = None,
                 joint_law: JointLaw | None = None) -> int:
        """Attach link ``name`` to link ``parent`` by a joint; returns the body index of the new link.

        placement (4, 4): pose of the new link frame in the parent link frame at r = 0, m;
        axis (3,): joint axis in the new link frame (normalised here); inertia (6, 6) about the link origin
        in the link frame (see :func:`sim.spatial.spatial_inertia`).
        """
        if name in self._links:
            raise ValueError(f"link {name!r} defined twice")
        if parent not in self._links:
            raise ValueError(f"link {name!r}: parent {parent!r} is not defined (add parents first)")
        X = np.eye(4) if placement is None else np.array(placement, dtype=float).reshape(4, 4)
        M = np.zeros((6, 6)) if inertia is None else np.array(inertia, dtype=float).reshape(6, 6)
        link = self._links[parent]
        X_body = link.pose @ X  # pose of the new link in the parent's body frame
        if joint_type == "fixed":
            self._inertia[link.body] = self._inertia[link.body] + transform_inertia(X_body, M)
            self._links[name] = _Link(link.body, X_body)
            return link.body
        if joint_type not in JOINT_TYPES:
            raise ValueError(f"joint {joint_name or name!r}: unknown type {joint_type!r}")
        a = np.asarray(axis, dtype=float).reshape(3)
        norm = np.linalg.norm(a)
        if norm == 0.0:
            raise ValueError(f"joint {joint_name or name!r}: zero axis")
        A = np.zeros(6)
        if joint_type == "revolute":
            A[3:] = a / norm
        else:
            A[:3] = a / norm
        j = len(self._body_names)
        k = j - 1
        self._body_names.append(name)
        self._parent.append(link.body)
        self._placement.append(X_body)
        self._axis.append(A)
        self._inertia.append(M)
        self._joint_names.append(joint_name or name)
        self._joint_types.append(joint_type)
        self._actuated.append(bool(actuated))
        self._q_rest.append(float(q_rest))
        if motion_law is not None:
            self._motion_laws[k] = motion_law
        if joint_law is not None:
            self._joint_laws[k] = joint_law
        self._links[name] = _Link(j, np.eye(4))
        return j

    def add_force_model(self, force_model) -> None:
        self.force_models.append(force_model)

    def build(self, metadata: dict | None = None) -> Model:
        frames = {name: (link.body, link.pose.copy()) for name, link in self._links.items()}
        return Model(joint_names=self._joint_names, body_names=self._body_names, parent=self._parent,
                     joint_placement=np.array(self._placement), joint_axis=np.array(self._axis),
                     inertia=np.array(self._inertia), actuated=self._actuated, q_rest=self._q_rest,
                     joint_types=self._joint_types, base_mode=self.base_mode, gravity=self.gravity,
                     motion_laws=self._motion_laws, joint_laws=self._joint_laws,
                     force_models=self.force_models, base_motion=self.base_motion, base_pose=self.base_pose,
                     frames=frames, metadata=metadata)


__all__ = ["Model", "Data", "ModelBuilder", "BaseMotion", "StaticBase", "CallableBaseMotion",
           "spatial_inertia", "ViscoElastic"]
