"""The job spec (job.py) and its parts: what a user may write, checked before any accelerator is spent, and how it enters
its content hash (hashing.py)."""
