"""Can the dashboard open a window here? A check that runs before Qt does (no Qt import), so that a machine
without Qt's system libraries gets the exact install command instead of Qt's abort.

Qt picks its platform plugin from ``QT_QPA_PLATFORM`` (``xcb``, X11, by default on Linux). The plugin is a shared
library of PyQt5's wheel that links against system libraries the wheel does not ship (``libxcb-icccm.so.4``,
``libxcb-keysyms.so.1``, ``libxcb-xinerama.so.0``, ... on a minimal Debian or Ubuntu). :func:`dashboard_problem`
asks the dynamic linker (``ldd``) which of them it cannot find, names their Debian packages
(:data:`DEBIAN_PACKAGES`), and says it in one message with the ``sudo apt-get install ...`` line; it also says when
the xcb plugin has no X display to talk to. ``MMS_QT_PLATFORM_PLUGIN`` names another plugin file to check (a test
points it at a library with a missing dependency).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

#: the environment variable naming the platform plugin file to check instead of PyQt5's own
PLUGIN_ENV = "MMS_QT_PLATFORM_PLUGIN"
#: platforms that draw into memory or a remote client: no display and no X libraries needed
HEADLESS_PLATFORMS = ("offscreen", "minimal", "vnc", "webgl")
#: shared objects Qt's platform plugins link against -> the Debian/Ubuntu package that ships each
DEBIAN_PACKAGES = {
    "libxcb-icccm.so.4": "libxcb-icccm4", "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1", "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render-util.so.0": "libxcb-render-util0", "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xkb.so.1": "libxcb-xkb1", "libxcb-shape.so.0": "libxcb-shape0", "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-util.so.1": "libxcb-util1", "libxcb-cursor.so.0": "libxcb-cursor0", "libxcb.so.1": "libxcb1",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0", "libxkbcommon.so.0": "libxkbcommon0",
    "libX11-xcb.so.1": "libx11-xcb1", "libX11.so.6": "libx11-6", "libGL.so.1": "libgl1", "libEGL.so.1": "libegl1",
    "libfontconfig.so.1": "libfontconfig1", "libfreetype.so.6": "libfreetype6", "libdbus-1.so.3": "libdbus-1-3",
    "libwayland-client.so.0": "libwayland-client0", "libwayland-cursor.so.0": "libwayland-cursor0",
}
#: how long ldd may take on one library, s
LDD_TIMEOUT_S = 20.0
_NOT_FOUND = re.compile(r"^\s*(\S+)\s*=>\s*not found", re.MULTILINE)


def platform_name(env: dict[str, str]) -> str:
    """The platform plugin Qt will load: ``QT_QPA_PLATFORM`` (up to its first ``:`` option), else xcb."""
    return (env.get("QT_QPA_PLATFORM") or "xcb").split(":", 1)[0].strip() or "xcb"


def plugin_path(platform: str, env: dict[str, str]) -> Path | None:
    """The plugin file to check: ``MMS_QT_PLATFORM_PLUGIN``, else PyQt5's ``libq<platform>.so`` (None: not found)."""
    if env.get(PLUGIN_ENV):
        return Path(env[PLUGIN_ENV])
    import importlib.util

    spec = importlib.util.find_spec("PyQt5")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        candidate = Path(root) / "Qt5" / "plugins" / "platforms" / f"libq{platform}.so"
        if candidate.is_file():
            return candidate
    return None


def missing_libraries(plugin: Path, env: dict[str, str]) -> list[str]:
    """The shared objects ``plugin`` needs that the dynamic linker cannot find (``ldd``), in order, once each."""
    result = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, timeout=LDD_TIMEOUT_S,
                            env={**env, "LC_ALL": "C"})
    return list(dict.fromkeys(_NOT_FOUND.findall(result.stdout + result.stderr)))


def install_command(libraries: list[str]) -> str:
    """The ``apt-get install`` line for ``libraries`` (a library without a known package is searched for)."""
    packages = [DEBIAN_PACKAGES[name] for name in libraries if name in DEBIAN_PACKAGES]
    unknown = [name for name in libraries if name not in DEBIAN_PACKAGES]
    line = f"sudo apt-get install {' '.join(dict.fromkeys(packages))}" if packages else ""
    if unknown:
        line += ("; " if line else "") + "apt-file search " + " ".join(unknown) + " (to find the package of each)"
    return line


def dashboard_problem(env: dict[str, str] | None = None) -> str | None:
    """Why the dashboard cannot open a window here (one message, with the command that fixes it), or None."""
    env = dict(os.environ if env is None else env)
    platform = platform_name(env)
    if platform in HEADLESS_PLATFORMS or not sys.platform.startswith("linux"):
        return None
    plugin = plugin_path(platform, env)
    if plugin is None:
        return f"Qt has no '{platform}' platform plugin here (QT_QPA_PLATFORM={env.get('QT_QPA_PLATFORM', '')!r})"
    try:
        missing = missing_libraries(plugin, env)
    except (OSError, subprocess.SubprocessError) as exc:   # no ldd (not glibc): Qt will say for itself
        print(f"mms: cannot check Qt's libraries ({exc}); starting the dashboard anyway", file=sys.stderr)
        missing = []
    if missing:
        return (f"Qt's '{platform}' platform plugin cannot load: the system lacks {', '.join(missing)}. "
                f"Install them with: {install_command(missing)}")
    if platform == "xcb" and not env.get("DISPLAY"):
        return "no X display (DISPLAY is not set): the dashboard needs one (or `mms dash --screenshot` offscreen)"
    return None
