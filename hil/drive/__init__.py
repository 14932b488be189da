"""The servo driver (`mms drive`): simulator states to a rig, telemetry back, the rig kept safe."""
