"""The configuration files shipped with mms-hil, installed as package data (robots/, rigs/, network.toml).

Commands find them by name through :func:`sim.config.shipped_configs` (``importlib.resources``), so they work
from any directory after a non-editable ``pip install``; in a clone, ``configs/...`` paths name the same files.
"""
