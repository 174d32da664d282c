"""In-process entry points that prepare MaxText's own modules and then run them unmodified.

Each is started as `python -m trainer.maxtext_entry.<name> <maxtext args>` by runner.py, never
imported into the pipeline process: JAX state and memory stay in the stage's own process.
"""
