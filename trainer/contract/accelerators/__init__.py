"""The TPU slices (tpu.py) and generations (tpu_generations.py) every spec is checked against: the one home of these facts."""
