"""What a run writes and reports about its spec: progress events, exit codes, the run directory's layout, evaluations,
samples, checkpoints and the document the stages hand MaxText's shims."""
