"""The dashboard's 3-D pane: the robot's bodies as simple solids (gui/scene3d.py), posed from ``sim/state``, with a
translucent ghost copy posed by the measured servo angles where the rig measures them.

Drawn with pyqtgraph's OpenGL widgets (``GLViewWidget``, a ``QOpenGLWidget`` rendering into a framebuffer object).
When Qt cannot create an OpenGL context (Qt's ``offscreen`` platform has none without an X server), or when the
caller says so (``opengl=False``), the pane is one line saying why, and the rest of the dashboard runs as before.

A machine without a display still renders it with :data:`HEADLESS_GL_ENV` (Mesa's software rasteriser through EGL
without any window system): Qt's ``eglfs`` platform on Mesa's ``surfaceless`` EGL platform creates OpenGL ES 3
contexts and framebuffer objects, but no window surface, so a window is never shown there; ``QWidget.grab`` of the
unshown window lays it out and renders the 3-D pane into it (the screenshot mode, the tests).
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pyqtgraph as pg
from PyQt5.QtCore import QObject, Qt, pyqtSignal
from PyQt5.QtGui import QImage, QOpenGLContext
from PyQt5.QtWidgets import QAbstractScrollArea, QCheckBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from gui.scene3d import ELLIPSOID, PLATE, TUBE, Kinematics, Shape, body_shapes, robot_size

#: environment of a process that renders OpenGL without a display: Qt's eglfs platform on Mesa's surfaceless EGL
#: (llvmpipe); eglfs insists on opening a framebuffer device it never draws to, /dev/null serves; PyOpenGL (what
#: pyqtgraph's items call) must look its functions and current context up through EGL too
HEADLESS_GL_ENV = {"QT_QPA_PLATFORM": "eglfs", "EGL_PLATFORM": "surfaceless", "QT_QPA_EGLFS_FB": "/dev/null",
                   "PYOPENGL_PLATFORM": "egl"}
#: colours (r, g, b, a) of the simulated bodies by shape, and of the measured ghost
COLOURS = {ELLIPSOID: (0.55, 0.62, 0.75, 1.0), PLATE: (0.95, 0.62, 0.20, 1.0), TUBE: (0.35, 0.70, 0.45, 1.0)}
GHOST_COLOUR = (0.20, 0.85, 1.0, 0.35)
BACKGROUND = (30, 30, 36)
#: tessellation of the ellipsoids and tubes: enough for a smooth outline at the pane's size
SPHERE_ROWS, SPHERE_COLUMNS, TUBE_COLUMNS = 12, 20, 16
#: the camera's distance in robot sizes (the largest half extent of the shapes) at a reset
CAMERA_DISTANCE_SIZES = 4.0


def opengl_problem() -> str | None:
    """Why this process cannot draw the 3-D view (no OpenGL context on Qt's platform, PyOpenGL missing), or None."""
    from PyQt5.QtGui import QGuiApplication

    if not QOpenGLContext().create():
        return f"no OpenGL context on Qt's {QGuiApplication.platformName()!r} platform"
    try:
        import OpenGL.GL  # noqa: F401  (pyqtgraph's GL items call it)
    except ImportError as exc:
        return f"PyOpenGL is missing ({exc})"
    return None


def _unit_mesh(kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Vertices (v, 3) and faces (f, 3) of a unit solid centred on the origin: sphere of radius 1, cylinder of radius
    1 and half length 1 along x, or cube of half side 1."""
    import pyqtgraph.opengl as gl

    if kind == ELLIPSOID:
        mesh = gl.MeshData.sphere(rows=SPHERE_ROWS, cols=SPHERE_COLUMNS)
        return mesh.vertexes(), mesh.faces()
    if kind == TUBE:
        mesh = gl.MeshData.cylinder(rows=1, cols=TUBE_COLUMNS, radius=[1.0, 1.0], length=2.0)
        along_z = mesh.vertexes() - [0.0, 0.0, 1.0]
        sides = mesh.faces()
        ring = np.arange(TUBE_COLUMNS)
        # the cylinder comes open: close both ends with a fan around a centre vertex each
        vertices = np.vstack([along_z, [[0.0, 0.0, -1.0], [0.0, 0.0, 1.0]]])
        bottom, top = len(along_z), len(along_z) + 1
        caps = np.vstack([np.column_stack([np.full(TUBE_COLUMNS, bottom), (ring + 1) % TUBE_COLUMNS, ring]),
                          np.column_stack([np.full(TUBE_COLUMNS, top), ring + TUBE_COLUMNS,
                                           (ring + 1) % TUBE_COLUMNS + TUBE_COLUMNS])])
        return vertices[:, [2, 0, 1]], np.vstack([sides, caps])    # the axis along x
    corners = np.array([[x, y, z] for x in (-1.0, 1.0) for y in (-1.0, 1.0) for z in (-1.0, 1.0)])
    faces = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                      [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
    return corners, faces


class RobotView(QWidget):
    """The 3-D pane: ``set_model`` once per robot, then ``set_pose`` per frame.

    ``opengl``: None probes (:func:`opengl_problem`); False shows the notice whatever the machine can do (what a
    machine without an OpenGL context shows, forced).
    """

    def __init__(self, opengl: bool | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.problem = "turned off" if opengl is False else opengl_problem()
        self.model = None               # the sim.model.Model drawn
        self.kinematics: Kinematics | None = None
        self.shapes: list[Shape] = []
        self.item = None               # the simulated copy's mesh (every solid in one)
        self.ghost_item = None         # the measured copy's
        self.poses_set = 0             # how many poses were drawn since the model was set
        self.last_poses: np.ndarray | None = None        # (N+1, 4, 4) world poses of the simulated copy
        self.last_ghost_poses: np.ndarray | None = None  # ... of the measured one (None: nothing measured)
        self._size = 1.0
        if self.problem is not None:
            self.gl = None
            self.notice = QLabel(f"3-D view unavailable: {self.problem}")
            self.notice.setWordWrap(True)
            layout.addWidget(self.notice)
            return
        import pyqtgraph.opengl as gl

        self.notice = None
        self.gl = gl.GLViewWidget()
        self.gl.setBackgroundColor(BACKGROUND)
        self.grid = gl.GLGridItem()
        self.gl.addItem(self.grid)
        self.title = QLabel("robot: waiting for the model")
        self.follow_box = QCheckBox("Follow")
        self.follow_box.setChecked(True)
        self.follow_box.setToolTip("keep the base at the centre of the view")
        self.ghost_box = QCheckBox("Measured")
        self.ghost_box.setChecked(True)
        self.ghost_box.setToolTip("the translucent copy posed by the measured servo angles")
        self.ghost_box.toggled.connect(lambda shown: self.ghost_item is not None and self.ghost_item.setVisible(
            shown and self.last_ghost_poses is not None))
        reset = QPushButton("Reset view")
        reset.clicked.connect(self.reset_camera)
        self.title.setWordWrap(True)
        layout.addWidget(self.title)
        row = QHBoxLayout()
        row.addWidget(self.follow_box)
        row.addWidget(self.ghost_box)
        row.addWidget(reset)
        row.addStretch(1)
        layout.addLayout(row)
        layout.addWidget(self.gl, 1)
        self.gl.setToolTip("drag: orbit; ctrl + drag or middle drag: pan; wheel: zoom")

    # ---- the robot -------------------------------------------------------------------------------------
    def set_model(self, model) -> None:
        """Draw this robot from now on (its solids built once; poses come with :meth:`set_pose`)."""
        self.model = model
        self.kinematics = Kinematics(model)
        self.shapes = body_shapes(model)
        self._size = robot_size(self.shapes)
        self.poses_set = 0
        self.last_poses = self.last_ghost_poses = None
        if self.gl is None:
            return
        parts = [_unit_mesh(shape.kind) for shape in self.shapes]
        sizes = [len(vertices) for vertices, _ in parts]
        offsets = np.cumsum([0] + sizes[:-1])
        # every solid in one mesh per copy, posed on the CPU (a few thousand vertices): one item to paint instead of
        # one per body halves the view's frame (pyqtgraph's per-item work in Python dominated it)
        self._vertices = np.vstack([vertices * shape.half_extents for (vertices, _), shape in zip(parts, self.shapes)]
                                   if parts else np.zeros((0, 3)))
        self._faces = np.vstack([faces + offset for (_, faces), offset in zip(parts, offsets)]
                                if parts else np.zeros((0, 3), dtype=int))
        self._vertex_solid = np.repeat(np.arange(len(parts)), sizes)
        self._face_colours = np.vstack([np.tile(COLOURS[shape.kind], (len(faces), 1))
                                        for (_, faces), shape in zip(parts, self.shapes)] if parts else np.zeros((0, 4)))
        self._bodies = np.array([shape.body for shape in self.shapes], dtype=int)
        self._solid_poses = np.stack([shape.pose for shape in self.shapes]) if parts else np.zeros((0, 4, 4))
        for item in (self.item, self.ghost_item):
            if item is not None:
                self.gl.removeItem(item)
        import pyqtgraph.opengl as gl

        # flat shading: pyqtgraph's smooth normals are a Python loop over the vertices, too slow for every frame
        self.item = gl.GLMeshItem(shader="shaded", smooth=False, glOptions="opaque")
        self.ghost_item = gl.GLMeshItem(color=GHOST_COLOUR, shader="balloon", smooth=False, glOptions="translucent")
        for item in (self.item, self.ghost_item):
            item.setVisible(False)   # until posed
            self.gl.addItem(item)
        spacing = 10 ** np.floor(np.log10(self._size))
        self.grid.setSize(40 * spacing, 40 * spacing)
        self.grid.setSpacing(spacing, spacing)
        self.title.setText(f"robot: {model.metadata.get('name', 'robot')}, {len(self.shapes)} bodies drawn")
        self.reset_camera()

    def reset_camera(self) -> None:
        if self.gl is None:
            return
        self.gl.setCameraPosition(distance=CAMERA_DISTANCE_SIZES * self._size, elevation=25, azimuth=-60)
        self._centre(self.last_poses)

    def _centre(self, poses: np.ndarray | None) -> None:
        if poses is not None:
            self.gl.opts["center"] = pg.Vector(*poses[0, :3, 3])

    # ---- poses -------------------------------------------------------------------------------------------
    def set_pose(self, base_pose: np.ndarray, q: np.ndarray, measured_q: np.ndarray | None = None) -> None:
        """Pose the simulated copy by the base pose (4, 4) world, m and ``q`` (n,), and the ghost by ``measured_q``
        (n,) (None: hide it). Poses of another length than the model's joints are ignored (a robot changing)."""
        if self.kinematics is None or len(q) != self.kinematics.n:
            return
        self.last_poses = self.kinematics.body_poses(base_pose, q)
        self.last_ghost_poses = None if measured_q is None else self.kinematics.body_poses(base_pose, measured_q)
        self.poses_set += 1
        if self.gl is None:
            return
        self._place(self.item, self.last_poses, True, self._face_colours)
        self._place(self.ghost_item, self.last_ghost_poses, self.ghost_box.isChecked(), None)
        if self.follow_box.isChecked():
            self._centre(self.last_poses)
        self.gl.update()

    def _place(self, item, poses: np.ndarray | None, shown: bool, face_colours: np.ndarray | None) -> None:
        """Pose one copy's mesh: each solid's vertices by its body's world pose (N+1, 4, 4) (None: hide it)."""
        if poses is None or not self.shapes:
            item.setVisible(False)
            return
        solids = (poses[self._bodies] @ self._solid_poses)[self._vertex_solid]     # (vertices, 4, 4)
        world = np.einsum("vij,vj->vi", solids[:, :3, :3], self._vertices) + solids[:, :3, 3]
        if face_colours is None:
            item.setMeshData(vertexes=world, faces=self._faces)
        else:
            item.setMeshData(vertexes=world, faces=self._faces, faceColors=face_colours)
        item.setVisible(shown)

    def show_problem(self, text: str) -> None:
        """Say in the pane's line what keeps the robot from being drawn (its model could not be had)."""
        if self.gl is not None:
            self.title.setText(text)

    def render_frame(self) -> QImage:
        """The pane's picture as OpenGL drew it (an empty image without OpenGL)."""
        return QImage() if self.gl is None else self.gl.grabFramebuffer()


class ModelLoader(QObject):
    """Builds a robot's Model from its config on a thread of its own (RayBot's takes half a second: not on the GUI
    thread); ``loaded`` or ``failed`` (one line) say how it went."""

    loaded = pyqtSignal(object)   # sim.model.Model
    failed = pyqtSignal(str)

    def load(self, source) -> None:
        """``source()`` returns ``(config dict, its path)``; it and the build run on a new thread."""
        threading.Thread(target=self._build, args=(source,), daemon=True).start()

    def _build(self, source) -> None:
        from sim.robots import build_robot

        try:
            config, path = source()
            self.loaded.emit(build_robot(config, path))
        except Exception as exc:  # a bad config names itself (ConfigError); anything else must not end the GUI
            self.failed.emit(f"{type(exc).__name__}: {exc}")


#: how long the probe of :func:`headless_gl_works` may take (a Python start, PyQt5, a context), s
HEADLESS_PROBE_TIMEOUT_S = 60.0
_PROBE = ("from PyQt5.QtWidgets import QApplication\n"
          "app = QApplication([])\n"
          "from gui.view3d import opengl_problem\n"
          "raise SystemExit(opengl_problem() is not None)\n")


def headless_gl_works() -> bool:
    """Whether a process with :data:`HEADLESS_GL_ENV` gets an OpenGL context here, asked of a child process: eglfs
    aborts the process that starts it where EGL is missing, so it is tried away from this one."""
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE], env={**os.environ, **HEADLESS_GL_ENV},
                               capture_output=True, timeout=HEADLESS_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0


def headless() -> bool:
    """Whether this process renders with :data:`HEADLESS_GL_ENV` (Qt's eglfs platform: no window is ever shown)."""
    from PyQt5.QtGui import QGuiApplication

    return QGuiApplication.platformName() == HEADLESS_GL_ENV["QT_QPA_PLATFORM"]


def freeze_scroll_bars(window: QWidget) -> None:
    """Turn off every scroll bar of ``window`` that Qt shows only as needed, before grabbing it headless: a scroll bar
    appearing while ``QWidget.grab`` lays out a window never shown makes Qt create the window's native surface, which
    surfaceless EGL cannot give (Qt aborts the process). A picture does not scroll anyway."""
    for area in window.findChildren(QAbstractScrollArea):
        for policy, setter in ((area.horizontalScrollBarPolicy, area.setHorizontalScrollBarPolicy),
                               (area.verticalScrollBarPolicy, area.setVerticalScrollBarPolicy)):
            if policy() == Qt.ScrollBarAsNeeded:
                setter(Qt.ScrollBarAlwaysOff)
