"""The robot's poses and shapes as Foxglove's well-known messages (scene.py, Foxglove's published JSON schemas in
schemas/): written into recordings (hil/recording) and served live (hil/bridge); docs/foxglove.md."""
