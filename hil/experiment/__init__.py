"""A whole experiment (`mms demo`): the processes of a tethered HIL run started, watched and stopped."""
