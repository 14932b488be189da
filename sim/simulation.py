"""Simulation: state, time stepping and outputs of a Model (docs/sim-api.md, "The simulation").

State vector y (flat, float64), in this order:
  base position p_0 (3,) m, world frame | base orientation unit quaternion (4,) (w, x, y, z), base -> world |
  base twist eta_0 (6,) = (V, Omega) in the base frame, m/s, rad/s | passive joint positions (n_p,) rad or m |
  modal coordinates of the modal bodies (n_e,) | passive joint velocities (n_p,) | modal rates (n_e,)
  (sim/flexible.py; n_e = 0 for a rigid model): the coordinates (n_g = n_p + n_e), then their rates, so that the
  "rosw" integrator's Jacobian block covers joints and modes alike (sim/integrators.py).
Actuated joints are not integrated: their (r, r_d, r_dd) come from their motion laws at every stage time.
A fixed base stays at ``model.base_pose`` with zero twist; an imposed base follows ``model.base_motion``
(the base part of y is then unused). The quaternion is renormalised after every step (and normalised when
read), so g_0 stays on SE(3).
"""
from __future__ import annotations

import math

import numpy as np

from .dynamics import hybrid_step
from .flexible import FlexData, flexible_step
from .fused import (FusedStepper, _state_derivative, _state_to_inputs, fused_unsupported, normalize_quaternion,
                    output_layout, pack_modal, pack_outputs, wrench_sum_world)
from .integrators import (INTEGRATORS, JACOBIAN_REFRESH_STEPS, AdaptiveState, column_groups, coordinate_branches,
                          dopri5_advance, coordinate_jacobian, rk4_step, rosw_matrix, rosw_step)
from .model import Data, Model
from .spatial import matrix_to_quat, quat_to_matrix


#: Relative slack when counting how many steps of dt fit in a duration (so 0.3 / 1e-4 gives 3000 steps).
STEP_COUNT_SLACK = 1e-9



class Simulation:
    """Time integration of a :class:`Model` with the hybrid algorithm.

    ``integrator``: "rk4" (fixed step dt, s), "rk45" (adaptive Dormand-Prince; ``step()`` still advances by
    exactly dt, with as many internal steps as the tolerances ``rtol``/``atol`` need) or "rosw" (fixed step,
    linearly implicit Rosenbrock-W ROS34PW2, order 3, with the passive joints' Jacobian at the reset state
    (rest), its velocity columns refreshed every ``jacobian_every`` steps (0: never): stiff, fast-decaying
    modes do not bound its step; sim/integrators.py).
    ``tau_applied`` (n,) N m / N: extra torques on passive joints (controllers, HIL), added to the joint laws.
    ``fused``: take the fused numba path (sim/fused.py: whole RK4 steps in one compiled call, same results)
    when the model qualifies; ``False`` forces the Python-orchestrated path. ``self.path`` says which one runs
    ("fused" or "python") and ``self.fused_unsupported`` why not (None when fused or not asked for).
    """

    def __init__(self, model: Model, integrator: str = "rk4", dt: float = 1e-4, *, rtol: float = 1e-8,
                 atol: float = 1e-10, fused: bool = True, jacobian_every: int = JACOBIAN_REFRESH_STEPS):
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator {integrator!r}: expected one of {INTEGRATORS}")
        if not dt > 0.0:
            raise ValueError(f"dt must be > 0 s, got {dt}")
        self.model = model
        self.integrator = integrator
        self.dt = float(dt)
        self.rtol, self.atol = float(rtol), float(atol)
        self.data = FlexData(model) if model.flexible is not None else Data(model)
        self._n_e = self.data.n_e if model.flexible is not None else 0
        n = model.n
        self.passive_index = np.flatnonzero(~model.actuated)      # (n_p,) joint indices
        self.actuated_index = np.flatnonzero(model.actuated)      # (n_a,)
        self._laws = [(int(k), model.motion_laws[int(k)]) for k in self.actuated_index]
        self._n_p = self.passive_index.size
        self._velocities = 13 + self._n_p + self._n_e     # start of the rates in the state
        # the evaluation's modal coordinates, rates, accelerations (n_e,) (FlexData's; empty for a rigid model)
        self._qe, self._qed, self._qedd = (self.data.qe, self.data.qed, self.data.qedd) if self._n_e else \
            (np.zeros(0), np.zeros(0), np.zeros(0))
        self._mode = model.base_mode
        self.tau_applied = np.zeros(n)
        self._q = self.data.q      # (n,) the evaluation's joint positions, shared with Data (no copy)
        self._qd = self.data.qd    # (n,)
        self._qdd = np.zeros(n)    # (n,) imposed accelerations of the actuated joints
        self._twist = np.zeros(6)
        self._adaptive = AdaptiveState(h=self.dt)
        self.evaluations = 0
        self.fused_unsupported = fused_unsupported(model, integrator) if fused else None
        self._fused = None
        self._data_from_fused = False   # Data holds the fused path's evaluation at (self.t, self.y)
        self.jacobian = self._w_inverse = self._groups = self._branch = None
        # (steps since the Jacobian's last refresh, steps between refreshes, evaluations spent refreshing)
        self._refresh = np.array([0, int(jacobian_every), 0], dtype=np.int64)
        if integrator == "rosw":
            self.reset()
            # (2 n_g, 2 n_g) block of d(dy/dt)/dy of the coordinates (passive joints, modes) at rest, t = 0; its
            # evaluations are not counted.
            self._branch = coordinate_branches(model.parent, self._coordinate_bodies())
            self._groups = column_groups(self._branch)
            self.jacobian = coordinate_jacobian(self._evaluate, 0.0, self.y, self._branch)
            self._w_inverse = rosw_matrix(self.jacobian, self.dt)
            self.evaluations = 0
        if fused and self.fused_unsupported is None:
            self._fused = FusedStepper(model, self.data, self.passive_index, model.base_pose, integrator,
                                       self.jacobian, self._w_inverse, self._refresh, self._groups, self._branch)
        self._output_slices, start = [], 0
        for name, size in output_layout(n, self._n_p):
            self._output_slices.append((name, start, start + size))
            start += size
        self._rigid_output_size = start
        if self._n_e:   # modal coordinates and rates (n_e,) of the modal bodies, after the sim/state fields
            for name in ("modal_q", "modal_qd"):
                self._output_slices.append((name, start, start + self._n_e))
                start += self._n_e
        self._output_size = start
        self._quat_slice = next(entry for entry in self._output_slices if entry[0] == "base_quat")
        # advance_to's two step ends ((t s, packed outputs), both) and the (t, y, tau) they were taken at
        self._dense_before = self._dense_now = self._dense_key = None
        self.reset()

    # ------------------------------------------------------------------------------------------- state
    def reset(self, q=None, qd=None, base_pose=None, base_twist=None) -> None:
        """t = 0; passive joints at q_rest (or ``q``, (n,), actuated entries ignored), zero velocities (or
        ``qd``); base at ``model.base_pose`` (or ``base_pose`` (4, 4)) with zero twist (or ``base_twist``)."""
        self.t = 0.0
        self.y = np.zeros(13 + 2 * self._n_p + 2 * self._n_e)
        self.y[3] = 1.0
        self._adaptive = AdaptiveState(h=self.dt)
        self.set_state(q=self.model.q_rest if q is None else q, qd=qd,
                       base_pose=self.model.base_pose if base_pose is None else base_pose,
                       base_twist=base_twist)

    def set_state(self, q=None, qd=None, base_pose=None, base_twist=None) -> None:
        """Overwrite parts of the state: q, qd (n,) (only passive entries are used), base_pose (4, 4) world,
        base_twist (6,) in the base frame (floating base only; a fixed base keeps zero twist)."""
        n_p, velocities = self._n_p, self._velocities
        if q is not None:
            self.y[13:13 + n_p] = np.asarray(q, dtype=float).reshape(self.model.n)[self.passive_index]
        if qd is not None:
            self.y[velocities:velocities + n_p] = np.asarray(qd, dtype=float).reshape(self.model.n)[self.passive_index]
        if base_pose is not None:
            g = np.asarray(base_pose, dtype=float).reshape(4, 4)
            self.y[0:3] = g[:3, 3]
            self.y[3:7] = matrix_to_quat(g[:3, :3])
        if base_twist is not None and self._mode == "floating":
            self.y[7:13] = np.asarray(base_twist, dtype=float).reshape(6)
        self._fixed_pose = self._pose_from(self.y)
        self._refresh[0] = self._refresh[1]      # a new state: refresh the Jacobian at the next step
        if self._fused is not None:
            self._fused.set_fixed_pose(self._fixed_pose)
        self._data_from_fused = False

    def inputs_changed(self) -> None:
        """A live force-model parameter was changed from outside (sim.measured_wrench): the derivative kept from
        the last evaluation no longer holds (the step ends kept for dense output stay: they are what was
        integrated)."""
        if self._fused is not None:
            self._fused.invalidate()
        self._data_from_fused = False

    @property
    def path(self) -> str:
        """"fused" (whole steps in one numba call, sim/fused.py) or "python" (one kernel call per stage)."""
        return "python" if self._fused is None else "fused"

    @staticmethod
    def _pose_from(y) -> np.ndarray:
        g = np.eye(4)
        quat = y[3:7] / math.sqrt(float(y[3:7] @ y[3:7]))
        g[:3, :3] = quat_to_matrix(quat)
        g[:3, 3] = y[0:3]
        return g

    def _coordinate_bodies(self) -> np.ndarray:
        """The body each coordinate of the state moves (n_g,): a passive joint's child body, a modal
        coordinate's modal body."""
        bodies = [int(k) + 1 for k in self.passive_index]
        if self._n_e:
            for j in sorted(self.model.flexible.bodies):
                bodies += [int(j)] * self.model.flexible.bodies[j].n_e
        return np.array(bodies, dtype=np.int64)

    # ------------------------------------------------------------------------------------------- dynamics
    def _evaluate(self, t: float, y: np.ndarray) -> np.ndarray:
        """Evaluate the hybrid dynamics at (t, y) into self.data; return dy/dt (same layout as y)."""
        model, data = self.model, self.data
        floating = self._mode == "floating"
        _state_to_inputs(y, self.passive_index, floating, data.q, data.qd, self._qe, self._qed, data.base_pose,
                         data.base_twist)
        qdd = self._qdd
        for k, law in self._laws:
            data.q[k], data.qd[k], qdd[k] = law.evaluate(t)
        base_acc = None
        if floating:
            pose, twist = data.base_pose, data.base_twist
        elif self._mode == "fixed":
            pose, twist = self._fixed_pose, self._twist
        else:
            pose, twist, base_acc = model.base_motion.evaluate(t)
        dy = np.empty_like(y)
        if self._n_e:
            flexible_step(model, data, t, pose, twist, data.q, data.qd, self._qe, self._qed, qdd, self.tau_applied,
                          base_acc=base_acc)
        else:
            hybrid_step(model, data, t, pose, twist, data.q, data.qd, qdd, self.tau_applied, base_acc=base_acc)
        self.evaluations += 1
        self._data_from_fused = False
        _state_derivative(y, self.passive_index, floating, data.base_acc, data.qdd, self._qedd, dy)
        return dy

    def set_modal_state(self, qe=None, qed=None) -> None:
        """Overwrite the modal coordinates / rates (n_e,) of the modal bodies (sim/flexible.py; body order,
        ``self.data.offset[j]`` is body j's first)."""
        modal = 13 + self._n_p
        if qe is not None:
            self.y[modal:modal + self._n_e] = np.asarray(qe, dtype=float).reshape(self._n_e)
        if qed is not None:
            self.y[self._velocities + self._n_p:] = np.asarray(qed, dtype=float).reshape(self._n_e)
        self._refresh[0] = self._refresh[1]
        if self._fused is not None:
            self._fused.invalidate()
        self._data_from_fused = False

    def _normalize(self, y: np.ndarray) -> np.ndarray:
        normalize_quaternion(y)
        return y

    def step(self) -> None:
        """Advance the state by one step of dt (s)."""
        if self._fused is not None:
            self._fused_advance(1)
            return
        t0 = self.t
        if self.integrator == "rk4":
            self.y = self._normalize(rk4_step(self._evaluate, t0, self.y, self.dt))
        elif self.integrator == "rosw":
            refresh = self._refresh
            due = bool(refresh[1] > 0 and refresh[0] >= refresh[1])
            evaluations = self.evaluations
            self.y = self._normalize(rosw_step(self._evaluate, t0, self.y, self.dt, self.jacobian, self._w_inverse,
                                               refresh=(self._groups, self._branch) if due else None))
            if due:
                refresh[0] = 0
                refresh[2] += self.evaluations - evaluations - 4
                self.evaluations = evaluations + 4
            refresh[0] += 1
        else:
            self.y = dopri5_advance(self._evaluate, t0, self.y, t0 + self.dt, self._adaptive, rtol=self.rtol,
                                    atol=self.atol, normalize=self._normalize)
        self.t = t0 + self.dt

    def advance(self, duration: float) -> int:
        """As many steps of dt as fit in ``duration`` (s); returns the number of steps taken."""
        steps = int(math.floor(duration / self.dt * (1.0 + STEP_COUNT_SLACK) + STEP_COUNT_SLACK))
        if self._fused is not None:
            if steps > 0:
                self._fused_advance(steps)
            return steps
        for _ in range(steps):
            self.step()
        return steps

    def _tau_array(self) -> np.ndarray:
        """tau_applied as a contiguous float64 (n,) array (it may have been rebound to a list)."""
        tau = self.tau_applied
        if type(tau) is not np.ndarray or tau.dtype != np.float64 or not tau.flags.c_contiguous:
            tau = np.ascontiguousarray(tau, dtype=float).reshape(self.model.n)
        return tau

    def _fused_advance(self, steps: int) -> None:
        """``steps`` steps in one numba call (sim/fused.py); Data is left at the final state."""
        y = self.y.copy()   # a new array, as the Python path (callers may hold the old one)
        tau = self._tau_array()
        self.t, evaluations = self._fused.advance(self.t, y, self.dt, steps, tau)
        self.y = y
        self.evaluations += evaluations
        self._data_from_fused = True

    # ------------------------------------------------------------------------------------------- outputs
    def _joint_state(self) -> None:
        """Fill the joint positions/velocities (n,) at the current time without evaluating the dynamics."""
        n_p, pi = self._n_p, self.passive_index
        self._q[pi] = self.y[13:13 + n_p]
        self._qd[pi] = self.y[self._velocities:self._velocities + n_p]
        for k, law in self._laws:
            self._q[k], self._qd[k], self._qdd[k] = law.evaluate(self.t)

    @property
    def q(self) -> np.ndarray:
        """Joint positions (n,) at the current time (actuated ones from their laws), rad or m."""
        self._joint_state()
        return self._q.copy()

    @property
    def qd(self) -> np.ndarray:
        """Joint velocities (n,) at the current time, rad/s or m/s."""
        self._joint_state()
        return self._qd.copy()

    @property
    def base_pose(self) -> np.ndarray:
        """World pose (4, 4) of the base at the current time."""
        if self._mode == "imposed":
            return self.model.base_motion.evaluate(self.t)[0].copy()
        return self._fixed_pose.copy() if self._mode == "fixed" else self._pose_from(self.y)

    def outputs(self) -> dict[str, np.ndarray]:
        """The sim/state fields (docs/messages.md) at the current time, from a fresh evaluation:
        q, qd, qdd, tau (n,); strain (n_p,) = q - q_rest of the passive joints in joint order; base_pos (3,)
        world m; base_quat (4,) (w, x, y, z); base_twist (6,) base frame; base_wrench (6,) support on base,
        base frame, N and N m (zero when floating); ext_wrench (6,) total non-gravity external wrench of the
        force models, world frame, about O_0. After a fused step the evaluation the step left in Data (at the
        current time and state, same applied torques and law values) is used as is: no extra evaluation."""
        packed = np.empty(self._output_size)
        self._pack_outputs(packed)
        return self._unpack(packed)

    def _pack_outputs(self, out: np.ndarray) -> None:
        """The outputs at the current time into out (output size,) (layout: sim.fused.output_layout)."""
        if not (self._data_from_fused and self._fused.valid_at(self.t, self.y, self._tau_array())):
            self._evaluate(self.t, self.y)
        pack_outputs(self.model.parent, self.data.buffer, self.model.q_rest, self.passive_index,
                     out[:self._rigid_output_size])
        if self._n_e:
            pack_modal(self.y, self._n_p, out)

    def _unpack(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """{field: view} of packed outputs (..., output size) (last axis split by sim.fused.output_layout)."""
        return {name: packed[..., start:stop] for name, start, stop in self._output_slices}

    def record(self, n_records: int, every: int = 1) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Advance ``n_records * every`` steps of dt, recording the outputs after every ``every`` steps: returns
        the record times (n_records,) s and {field: (n_records, ...)} with the fields of :meth:`outputs`. The same
        numbers as a loop of ``step()`` and ``outputs()``; on the fused path the whole loop is one compiled call
        (no Python per step or per record)."""
        n_records, every = int(n_records), int(every)
        if n_records < 0 or every < 1:
            raise ValueError(f"record({n_records}, {every}): expected n_records >= 0 and every >= 1")
        times, packed = self._record_packed(n_records, every)
        return times, self._unpack(packed)

    def _record_packed(self, n_records: int, every: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`record` with the outputs left packed: times (n_records,) s, outputs (n_records, output size)."""
        times = np.empty(n_records)
        packed = np.empty((n_records, self._output_size))
        if self._fused is not None and n_records > 0:
            y = self.y.copy()
            self.t, evaluations = self._fused.record(self.t, y, self.dt, every, self._tau_array(), times, packed)
            self.y = y
            self.evaluations += evaluations
            self._data_from_fused = True
        else:
            for row in range(n_records):
                for _ in range(every):
                    self.step()
                times[row] = self.t
                self._pack_outputs(packed[row])
        return times, packed

    def advance_to(self, t_target: float) -> dict[str, np.ndarray]:
        """Dense output for a publisher paced in t (``mms serve``): integrate in whole steps of dt until
        ``t >= t_target`` (s) and return the fields of :meth:`outputs` at ``t_target``, interpolated linearly
        between the two step ends around it (the quaternion renormalised; the actuated joints' q, qd, qdd from
        their laws at ``t_target``). The state is left at the step end at
        or after ``t_target``, so a dt that does not divide the publish period keeps its accuracy and its speed.

        Linear interpolation adds at most h^2/8 max|x''| to a field x between step ends of spacing h (for the
        flapper at 0.4 ms, 25 Hz, ~5e-4 of a stroke's amplitude in angle; docs/sim-api.md); it never feeds back
        into the integration. A target before the previous step end raises ValueError."""
        slack = STEP_COUNT_SLACK * self.dt
        valid = self._dense_valid()
        now, before = (self._dense_now, self._dense_before) if valid else ((self.t, np.empty(self._output_size)), None)
        if not valid:
            self._pack_outputs(now[1])
        if t_target <= self.t + slack:
            if t_target >= self.t - slack:
                return self._unpack(now[1].copy())
            if before is None or t_target < before[0] - slack:
                raise ValueError(f"advance_to({t_target!r}): before the previous step end "
                                 f"(t = {self.t!r} s, dt = {self.dt!r} s)")
            return self._unpack(self._interpolate(before, now, t_target))
        steps = max(1, math.ceil((t_target - self.t) / self.dt - STEP_COUNT_SLACK))
        times, packed = self._record_packed(steps, 1)
        before = now if steps == 1 else (float(times[-2]), packed[-2])
        now = (float(times[-1]), packed[-1])
        self._dense_before, self._dense_now = before, now
        self._dense_key = self._state_key()
        return self._unpack(self._interpolate(before, now, t_target))

    def _state_key(self) -> tuple[float, bytes, bytes]:
        """(t, y, tau_applied) as a comparable value (bytes compare in ~1 us where array_equal takes ~10)."""
        return self.t, self.y.tobytes(), self._tau_array().tobytes()

    def _dense_valid(self) -> bool:
        """The step ends kept by :meth:`advance_to` still describe the current state and applied torques."""
        return self._dense_key is not None and self._dense_key == self._state_key()

    def _interpolate(self, before: tuple[float, np.ndarray], after: tuple[float, np.ndarray],
                     t: float) -> np.ndarray:
        """Packed outputs (output size,) at t, linear between two step ends (t_a, packed) and (t_b, packed); the
        actuated joints' q, qd, qdd from their laws at t."""
        (t_a, a), (t_b, b) = before, after
        weight = min(1.0, max(0.0, (t - t_a) / (t_b - t_a)))
        out = a + weight * (b - a)
        _, start, stop = self._quat_slice
        quat_a, quat_b = a[start:stop], b[start:stop]
        if quat_a @ quat_b < 0.0:      # q and -q are one rotation: interpolate towards the near one
            out[start:stop] = quat_a - weight * (quat_b + quat_a)
        quat = out[start:stop]
        quat /= math.sqrt(quat @ quat)
        if self._laws:                 # the actuated joints exactly on their laws, not on a chord
            q, qd, qdd = (out[start:stop] for _, start, stop in self._output_slices[:3])
            for k, law in self._laws:
                q[k], qd[k], qdd[k] = law.evaluate(t)
        return out


def external_wrench_world(data: Data) -> np.ndarray:
    """Sum (6,) of ``data.f_ext`` (force models, no gravity) as one wrench (force N, moment N m) in the world
    frame about the base origin O_0."""
    return wrench_sum_world(data.g, data.f_ext)
