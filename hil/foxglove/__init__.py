"""Foxglove and PlotJuggler: the robot's poses as Foxglove's well-known messages (scene.py), written into
recordings (hil/recording) and served live (bridge.py); docs/foxglove.md."""
