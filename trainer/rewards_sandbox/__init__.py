"""Reward functions out of the trainer's process: worker processes with an empty environment, rlimits, no capabilities,
no network, no new process and writes only to their own directory where the runtime allows (worker.py,
confinement.py, pool.py), a deadline per call; the trainer holds stand-ins (proxy.py); `trainer sandbox-check` says
what held here (self_check.py)."""
