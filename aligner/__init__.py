"""gradwire.aligner: clock alignment and the global data-flow graph (issue 4)."""
