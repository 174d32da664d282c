"""Benches on the TPU v5e chip lent to this project: the GRPO train stage, the rollout engine's correctness there,
whole jobs through the service (bench/chip/README.md)."""
