"""``mms bridge``: the live topics for Foxglove (WebSocket, bridge.py) and PlotJuggler (ZeroMQ, plotjuggler.py);
docs/foxglove.md."""
