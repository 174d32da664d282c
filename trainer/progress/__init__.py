"""Reporting a run's progress: `EventReporter` writes each event (event_reporter.py); while train_rl runs,
train_rl_events.py turns what it writes (TensorBoard scalars, read by tensorboard_scalars.py with the
protobuf decoding in tensorboard_proto.py, and its evaluation and goodput lines) into events.
"""
