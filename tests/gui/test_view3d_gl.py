"""The 3-D view drawn by a real OpenGL context (tests/gui/gl_view3d_cases.py), in a child process that renders
without a display: Qt's eglfs platform on Mesa's surfaceless EGL (``gui.view3d.HEADLESS_GL_ENV``). This suite's own
process runs Qt's offscreen platform, which has no OpenGL context; a platform is chosen once per process."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from PyQt5.QtGui import QImage

from gui.view3d import HEADLESS_GL_ENV
from tests.gui.gl_view3d_cases import FLAPPER, pixels, write_recording

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("gl_view3d_cases.py")
#: the cases' own deadlines are 20 s each; a bound on the whole child run
CHILD_TIMEOUT_S = 240
#: the screenshot is taken this long after start: the model is built by then (imports of a few seconds)
SCREENSHOT_AFTER_S = 6
#: the thorax (grey-blue, shaded) has blue above red by 30-50 of 255; the grid, the background and the widgets by
#: less than 10
THORAX_BLUE_EXCESS = 25
#: half side of the square around the pane's centre that holds the thorax (28 mm long, 4 robot sizes away), pixels
PANE_CENTRE_BOX = 70


def without_display() -> dict[str, str]:
    """This environment without a display or a chosen Qt platform: a CI machine, a server."""
    env = {key: value for key, value in os.environ.items() if key not in ("DISPLAY", "QT_QPA_PLATFORM")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def test_the_3d_view_draws_the_robot_with_a_real_opengl_context():
    env = {**without_display(), **HEADLESS_GL_ENV}
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    report = child.stdout[-4000:] + child.stderr[-2000:]
    assert child.returncode == 0, report
    cases = len(re.findall(r"^def test_", CASES.read_text(), flags=re.M))
    assert re.search(rf"\b{cases} passed\b", child.stdout), report


def test_a_screenshot_without_a_display_holds_the_3d_view(tmp_path):
    recording, picture = tmp_path / "run.mcap", tmp_path / "dash.png"
    write_recording(recording, FLAPPER, states=1000)     # 10 s: still playing when the picture is taken
    child = subprocess.run([sys.executable, "-m", "hil.cli", "dash", "--replay", str(recording), "--screenshot",
                            str(picture), "--after", str(SCREENSHOT_AFTER_S)], cwd=ROOT, env=without_display(),
                           capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    assert child.returncode == 0, child.stdout + child.stderr[-2000:]
    image = pixels(QImage(str(picture)))
    assert image.shape[:2] == (1000, 1600)
    # the 3-D pane, top right above the channel list (x 1302-1600, y 64-484 at this size): the thorax is drawn at
    # its centre (the view follows the base), and the rest of the pane holds little of its colour
    blue = image[..., 2].astype(int) - image[..., 0].astype(int) > THORAX_BLUE_EXCESS
    pane, centre = blue[64:484, 1302:1600], blue[274 - PANE_CENTRE_BOX:274 + PANE_CENTRE_BOX,
                                                 1451 - PANE_CENTRE_BOX:1451 + PANE_CENTRE_BOX]
    assert centre.sum() > 200 and centre.sum() > 0.8 * pane.sum()
