"""Reward functions out of the trainer's process: worker processes with an empty environment, rlimits, no network
where Linux allows, and a deadline per call (worker.py, pool.py); the trainer holds stand-ins (proxy.py)."""
