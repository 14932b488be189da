"""Rig files: the serial microcontroller rigs, the Dynamixel bus rigs, their schemas and the host's view of any rig.

Both the emulators and the driver read rigs from here; neither owns the format."""
