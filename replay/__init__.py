"""gradwire.replay: discrete-event replay and throughput prediction (issue 5)."""
