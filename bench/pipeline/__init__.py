"""What the trainer's pipeline adds around MaxText: its overhead, the run directory, uploads to gs://, the reward
sandbox (bench/pipeline/README.md)."""
