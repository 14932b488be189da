"""The robot's pose as Foxglove's well-known messages (pure: no file, no socket): docs/foxglove.md.

``sim/state`` carries the base pose and the joint positions, not the bodies' poses, so they are derived here from
the model's forward kinematics: each joint's transform ``parent body -> body`` is its placement times the joint's
motion (``joint_placement[j] @ exp(A_j q_k)``, as the hybrid algorithm's first recursion), and ``world -> base``
is the state's ``base_pos`` / ``base_quat``. They are sent as one ``foxglove.FrameTransforms`` message per state
(topic :data:`TOPIC_POSES`): Foxglove's 3-D panel chains them into every body's world pose. The bodies' shapes
(:func:`sim.shapes.default_shapes`) are one ``foxglove.SceneUpdate`` (topic :data:`TOPIC_SCENE`), one entity per
body, locked to the body's frame, so that it needs sending only when the model is (re)announced.

Both are JSON maps following Foxglove's published JSON schemas (hil/foxglove/schemas, :func:`schema`).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.messages import SCHEMA_VERSION

if TYPE_CHECKING:
    from sim.model import Model
    from sim.shapes import Shape

FRAME_TRANSFORMS = "foxglove.FrameTransforms"
SCENE_UPDATE = "foxglove.SceneUpdate"
#: the channels written beside the project's own topics (MCAP and the bridge; not ZeroMQ topics)
TOPIC_POSES = "foxglove/poses"
TOPIC_SCENE = "foxglove/scene"
#: the root frame of every transform: the simulation's world frame (z up)
WORLD_FRAME = "world"
#: message encoding of the channels: Foxglove's JSON encoding (UTF-8 JSON text, schema encoding "jsonschema")
MESSAGE_ENCODING = "json"
SCHEMA_ENCODING = "jsonschema"
#: colour of the simulated bodies (RGBA 0..1)
BODY_COLOR = {"r": 0.35, "g": 0.6, "b": 0.85, "a": 0.9}
#: |base_quat| must be 1 within this: a publisher normalises every step, so a larger error is a corrupt message
QUAT_NORM_TOLERANCE = 1e-6
_SCHEMA_FILES = {FRAME_TRANSFORMS: "FrameTransforms.json", SCENE_UPDATE: "SceneUpdate.json"}


@cache
def schema(name: str) -> dict:
    """Foxglove's published JSON schema ``name`` (:data:`FRAME_TRANSFORMS` or :data:`SCENE_UPDATE`)."""
    return json.loads(files("hil.foxglove").joinpath("schemas").joinpath(_SCHEMA_FILES[name]).read_text())


class StateRefused(ValueError):
    """A ``sim/state`` payload that cannot be posed; ``reason`` is the short counter key, the message one line."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Posed:
    """What a state gives: ``stamp_ns`` int ns, ``q`` (n,) rad or m, ``base_pos`` (3,) m world,
    ``base_quat`` (4,) (w, x, y, z) world."""
    stamp_ns: int
    q: np.ndarray
    base_pos: np.ndarray
    base_quat: np.ndarray


def _finite_vector(payload: dict, key: str, size: int) -> np.ndarray:
    value = payload.get(key)
    if not isinstance(value, list) or len(value) != size:
        raise StateRefused(f"{key}_shape", f"sim/state {key}: expected {size} numbers")
    try:
        array = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise StateRefused(f"{key}_type", f"sim/state {key}: expected numbers") from None
    if not np.all(np.isfinite(array)):
        raise StateRefused(f"{key}_non_finite", f"sim/state {key}: not finite")
    return array


def check_state(model: Model, payload: Any) -> Posed:
    """The boundary of the pose path: a ``sim/state`` map of this schema version, for ``model`` (its joint count),
    with finite values and a unit quaternion; :class:`StateRefused` otherwise."""
    if not isinstance(payload, dict):
        raise StateRefused("malformed", "sim/state payload is not a map")
    version = payload.get("v")
    if version != SCHEMA_VERSION:
        raise StateRefused("schema_version", f"sim/state schema version {version!r} is not supported (this mms reads "
                                             f"version {SCHEMA_VERSION})")
    stamp = payload.get("stamp_ns")
    if not isinstance(stamp, int) or isinstance(stamp, bool) or stamp < 0:
        raise StateRefused("stamp_ns", "sim/state stamp_ns: expected an integer >= 0")
    q = _finite_vector(payload, "q", model.n)
    base_quat = _finite_vector(payload, "base_quat", 4)
    if abs(np.linalg.norm(base_quat) - 1.0) > QUAT_NORM_TOLERANCE:
        raise StateRefused("base_quat_norm", "sim/state base_quat: not a unit quaternion")
    return Posed(stamp, q, _finite_vector(payload, "base_pos", 3), base_quat)


def _time(stamp_ns: int) -> dict[str, int]:
    return {"sec": stamp_ns // 1_000_000_000, "nsec": stamp_ns % 1_000_000_000}


class PoseTranslator:
    """Foxglove messages of one model: :meth:`poses` per state, :meth:`scene` once per (re)announcement."""

    def __init__(self, model: Model, shapes: list[Shape] | None = None):
        # the kernel modules (numba) load here, when a robot is posed: `mms record` and `mms bridge` start without
        # them otherwise (about 0.5 s of CPU per start)
        from sim.shapes import default_shapes
        from sim.spatial import matrix_to_quat

        self.model = model
        self.shapes = default_shapes(model) if shapes is None else shapes
        placement = model.joint_placement[1:]
        self._placement_p = placement[:, :3, 3]                                     # (n, 3) m
        self._placement_R = placement[:, :3, :3]                                    # (n, 3, 3)
        # the placements' rotations as quaternion components (n,) each, and the revolute axes' components
        quats = np.array([matrix_to_quat(R) for R in self._placement_R]).reshape(-1, 4)
        self._pw, self._px, self._py, self._pz = (quats[:, i].copy() for i in range(4))
        self._ax, self._ay, self._az = (model.joint_axis[1:, 3 + i].copy() for i in range(3))
        self._linear = model.joint_axis[1:, :3]                                     # (n, 3) prismatic axes
        self._revolute = np.any(model.joint_axis[1:, 3:], axis=1)                   # (n,) bool
        names = model.body_names
        frames = [(WORLD_FRAME, names[0])] + [(names[model.parent[j]], names[j]) for j in range(1, model.n_bodies)]
        # each transform's constant text (frame ids), made once: a pose message is written ~100 times a second
        self._frame_text = [f'"parent_frame_id":{json.dumps(parent)},"child_frame_id":{json.dumps(child)}'
                            for parent, child in frames]

    def joint_transforms(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Translations (n, 3) m and rotations (n, 4) (w, x, y, z) of every body in its parent body's frame: the
        placement's rotation times the joint's (``(cos q/2, a sin q/2)`` for a revolute joint, none for a prismatic
        one), component by component (numpy's small-array calls cost more than the arithmetic here)."""
        half = 0.5 * q
        c, s = np.where(self._revolute, np.cos(half), 1.0), np.sin(half)
        bx, by, bz = self._ax * s, self._ay * s, self._az * s
        pw, px, py, pz = self._pw, self._px, self._py, self._pz
        rotation = np.stack([pw * c - px * bx - py * by - pz * bz, pw * bx + px * c + py * bz - pz * by,
                             pw * by - px * bz + py * c + pz * bx, pw * bz + px * by - py * bx + pz * c], axis=1)
        translation = self._placement_p + np.matmul(self._placement_R, (self._linear * q[:, None])[:, :, None])[:, :, 0]
        return translation, rotation

    def poses(self, state: Posed) -> bytes:
        """The ``foxglove.FrameTransforms`` message of one state in JSON: world -> base, then parent -> child per
        joint. Written from a template (the frame ids once, the numbers as ``repr``, exactly as ``json.dumps``
        writes them; all finite, :func:`check_state`): 1.8x faster than building the maps and ``json.dumps`` (214 vs
        376 us for the flapper, in one run on a loaded machine)."""
        translation, rotation = self.joint_transforms(state.q)
        stamp = f'"timestamp":{{"sec":{state.stamp_ns // 1_000_000_000},"nsec":{state.stamp_ns % 1_000_000_000}}}'
        translations = [state.base_pos.tolist()] + translation.tolist()
        rotations = [state.base_quat.tolist()] + rotation.tolist()
        transforms = [f'{{{stamp},{frame},"translation":{{"x":{x!r},"y":{y!r},"z":{z!r}}},'
                      f'"rotation":{{"x":{qx!r},"y":{qy!r},"z":{qz!r},"w":{w!r}}}}}'
                      for frame, (x, y, z), (w, qx, qy, qz) in zip(self._frame_text, translations, rotations)]
        return ('{"transforms":[' + ",".join(transforms) + "]}").encode()

    def scene(self, stamp_ns: int) -> dict[str, Any]:
        """The ``foxglove.SceneUpdate`` map of the bodies' shapes (one entity per body, in the body's frame)."""
        stamp = _time(stamp_ns)
        entities = []
        for body, name in enumerate(self.model.body_names):
            entity = {"timestamp": stamp, "frame_id": name, "id": name, "lifetime": {"sec": 0, "nsec": 0},
                      "frame_locked": True, "metadata": [], "arrows": [], "cubes": [], "spheres": [],
                      "cylinders": [], "lines": [], "triangles": [], "texts": [], "models": []}
            for shape in (s for s in self.shapes if s.body == body):
                primitive = {"pose": _pose(shape.pose), "size": _vector3(shape.size), "color": BODY_COLOR}
                entity["spheres" if shape.kind == "sphere" else "cubes"].append(primitive)
            entities.append(entity)
        return {"deletions": [], "entities": entities}


def _vector3(values) -> dict[str, float]:
    x, y, z = (float(v) for v in values)
    return {"x": x, "y": y, "z": z}


def _quaternion(wxyz) -> dict[str, float]:
    w, x, y, z = (float(v) for v in wxyz)
    return {"x": x, "y": y, "z": z, "w": w}


def _pose(g: np.ndarray) -> dict[str, Any]:
    from sim.spatial import matrix_to_quat

    return {"position": _vector3(g[:3, 3]), "orientation": _quaternion(matrix_to_quat(g[:3, :3]))}


def encode(message: dict[str, Any]) -> bytes:
    """A message in Foxglove's JSON encoding (compact UTF-8; NaN is not JSON and is refused)."""
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode()


def pose_period_ns(rate_hz: float) -> int:
    """Least time between two pose messages, ns, for at most ``rate_hz`` of them (0: every state)."""
    return 0 if rate_hz <= 0 else int(math.ceil(1e9 / rate_hz))


#: the scene (shapes) is sent again at least this often, ns of publisher time: a viewer that joins late or seeks
#: into a recording finds it within a second
SCENE_PERIOD_NS = 1_000_000_000


@dataclass
class FoxgloveMessage:
    topic: str           # TOPIC_POSES or TOPIC_SCENE
    schema_name: str     # FRAME_TRANSFORMS or SCENE_UPDATE
    data: bytes          # JSON
    stamp_ns: int        # the state's stamp_ns


class PoseStream:
    """Which ``sim/state`` messages become Foxglove messages: poses on a schedule of one per ``period_ns`` of
    publisher time (:func:`pose_period_ns`; 0: every state), the first state at or after each due time (so the
    jitter of the stamps does not lower the rate), the scene with the first and then every
    :data:`SCENE_PERIOD_NS`. Refused states are counted by reason (``refused``) and dropped."""

    def __init__(self, translator: PoseTranslator, period_ns: int):
        self.translator = translator
        self.period_ns = period_ns
        self.refused: dict[str, int] = {}
        self.last_refusal = ""          # the one-line reason of the latest refused state
        self.posed = 0
        self._last_pose_ns: int | None = None
        self._due_ns: int | None = None      # when the next pose is due (publisher time, ns)
        self._last_scene_ns: int | None = None

    def due(self, stamp_ns: int) -> bool:
        """Whether a state stamped ``stamp_ns`` is to be posed (checked before decoding it); a stamp that goes
        back (a restarted publisher) starts afresh."""
        last = self._last_pose_ns
        return last is None or stamp_ns < last or stamp_ns >= self._due_ns

    def messages(self, payload: Any) -> list[FoxgloveMessage]:
        """The Foxglove messages of one decoded ``sim/state`` (none when it is refused or not due)."""
        try:
            state = check_state(self.translator.model, payload)
        except StateRefused as exc:
            self.refused[exc.reason] = self.refused.get(exc.reason, 0) + 1
            self.last_refusal = str(exc)
            return []
        if not self.due(state.stamp_ns):
            return []
        due = self._due_ns
        # on schedule; a restart (stamps going back) or a gap of more than a period (a pause) starts it afresh
        restart = due is None or state.stamp_ns < self._last_pose_ns or state.stamp_ns - due >= self.period_ns
        self._due_ns = (state.stamp_ns if restart else due) + self.period_ns
        self._last_pose_ns = state.stamp_ns
        self.posed += 1
        out = []
        last_scene = self._last_scene_ns
        if last_scene is None or state.stamp_ns < last_scene or state.stamp_ns - last_scene >= SCENE_PERIOD_NS:
            self._last_scene_ns = state.stamp_ns
            out.append(FoxgloveMessage(TOPIC_SCENE, SCENE_UPDATE, encode(self.translator.scene(state.stamp_ns)),
                                       state.stamp_ns))
        out.append(FoxgloveMessage(TOPIC_POSES, FRAME_TRANSFORMS, self.translator.poses(state), state.stamp_ns))
        return out


def pose_stream(config: dict, path, rate_hz: float) -> PoseStream:
    """The :class:`PoseStream` of a parsed robot file (``path``: the file, for relative names and messages);
    :class:`sim.config.ConfigError` when the robot does not build into a rigid tree (a Cosserat rod, a
    constrained TMT system, modal bodies)."""
    from sim.robots import build_rigid_robot

    model = build_rigid_robot(config, path, "are not posed: their deformation is not in the rigid transforms")
    return PoseStream(PoseTranslator(model), pose_period_ns(rate_hz))
