"""One module per pipeline stage: a pure builder of MaxText's command line, and its runner."""
