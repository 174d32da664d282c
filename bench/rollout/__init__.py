"""The jax rollout engine's speed on CPU against its shipped version, transformers and the bandwidth bound
(bench/rollout/README.md)."""
