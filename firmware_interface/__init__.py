"""The serial protocol between the PC and a rig's microcontroller, the rig emulator and the reference firmware."""
