"""Recording (`mms record`): every topic into an MCAP file, its salvage after a crash, and its exports."""
