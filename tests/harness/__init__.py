"""Tests of the harness's stand-ins outside the emulated cluster (harness/held_trainer.py)."""
