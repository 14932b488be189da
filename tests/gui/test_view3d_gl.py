"""The 3-D view drawn by a real OpenGL context (tests/gui/gl_view3d_cases.py), in a child process that renders
without a display: Qt's eglfs platform on Mesa's surfaceless EGL (``gui.view3d.HEADLESS_GL_ENV``). This suite's own
process runs Qt's offscreen platform, which has no OpenGL context; a platform is chosen once per process."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from gui.view3d import HEADLESS_GL_ENV

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("gl_view3d_cases.py")
#: the cases' own deadlines are 20 s each; a bound on the whole child run
CHILD_TIMEOUT_S = 240


def test_the_3d_view_draws_the_robot_with_a_real_opengl_context():
    env = {key: value for key, value in os.environ.items() if key != "DISPLAY"}
    env.update(HEADLESS_GL_ENV)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    report = child.stdout[-4000:] + child.stderr[-2000:]
    assert child.returncode == 0, report
    cases = len(re.findall(r"^def test_", CASES.read_text(), flags=re.M))
    assert re.search(rf"\b{cases} passed\b", child.stdout), report
