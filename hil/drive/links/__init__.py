"""The serial links the driver talks to a rig through: one per kind of device, and their composition."""
