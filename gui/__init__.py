"""The PyQt5 + pyqtgraph dashboard."""
