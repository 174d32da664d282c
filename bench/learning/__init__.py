"""Does GRPO through rljob learn: the arithmetic task, the pre-registered benches against a control and TRL, the
learning verdict's error rates (bench/learning/README.md)."""
