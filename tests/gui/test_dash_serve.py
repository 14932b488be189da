"""The dashboard against a real `mms serve` subprocess running the flapper (the end-to-end live path)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gui.signals import strain_group
from gui.window import CONNECTED, DashboardOptions, DashboardWindow
from sim import messages

ROOT = Path(__file__).resolve().parents[2]
FLAPPER = ROOT / "configs" / "robots" / "flapper.toml"
#: the server compiles its kernels and the machine is shared: a generous deadline for the first data
DEADLINE_MS = 60_000


@pytest.fixture
def server(endpoints):
    process = subprocess.Popen(
        [sys.executable, "-m", "hil.cli", "serve", "--pub", endpoints.sim_pub, "--control", endpoints.sim_control,
         "--rate", "200", str(FLAPPER)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    yield process
    process.send_signal(signal.SIGINT)
    try:
        process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def test_dashboard_plots_the_flapper_served_by_mms_serve(qtbot, endpoints, server):
    window = DashboardWindow(DashboardOptions(endpoints=endpoints, window_s=5.0, stale_after_s=3.0,
                                              disconnected_after_s=6.0))
    qtbot.addWidget(window)
    window.show()
    try:
        def filled() -> bool:
            assert server.poll() is None, server.stderr.read()
            torque = {spec.channel: item for spec, item in window.panels["torque"].curves.values()}
            tips = window.store.buffers.get("sim.tip")
            return (set(torque) == {"stroke_r", "stroke_l"} and all(i.xData is not None and len(i.xData) > 20 for i in torque.values())
                    and tips is not None and len(tips) > 20)

        qtbot.waitUntil(filled, timeout=DEADLINE_MS)
        qtbot.waitUntil(lambda: window.topic_link(messages.TOPIC_SIM_STATE) == CONNECTED
                        and window.rates[messages.TOPIC_SIM_STATE] > 0.0, timeout=DEADLINE_MS)
        qtbot.waitUntil(lambda: "robot hawkmoth" in window.sim_label.text(), timeout=DEADLINE_MS)
        batch = window._batch
        assert batch.malformed == 0, "the server's messages must all decode under the dashboard's reading"
        # the strain panel holds exactly the passive joints the server announced
        status = batch.status[messages.TOPIC_SIM_STATUS]
        passive = [n for n, a in zip(status["joint_names"], status["actuated"]) if not a]
        assert len(passive) == 14
        strain_channels = {spec.channel for spec, _ in window.panels["strain"].curves.values()}
        assert strain_channels == set(passive)
        # each tip sum is the sum of its wing's twist (or bending) strains, sample by sample
        strain, tips = window.store.buffers["sim.strain"], window.store.buffers["sim.tip"]
        rows = min(len(strain), len(tips))
        strain_values, tip_values = strain.values()[-rows:], tips.values()[-rows:]
        strain_names, tip_names = window.store.names["sim.strain"], window.store.names["sim.tip"]
        assert set(tip_names) == {"tip_twist_r", "tip_bend_r", "tip_twist_l", "tip_bend_l"}
        for column, tip in enumerate(tip_names):
            members = [i for i, name in enumerate(strain_names) if strain_group(name) == tip[len("tip_"):]]
            # M = 4 sections per wing; the first section's twist joint is the (actuated) stroke
            assert len(members) == (3 if "twist" in tip else 4)
            np.testing.assert_allclose(tip_values[:, column], strain_values[:, members].sum(axis=1), atol=1e-12)
        # the stroke torque moves (the wings flap)
        assert np.ptp(window.store.buffers["sim.tau"].values()[:, 0]) > 0.0
    finally:
        window.shutdown()
