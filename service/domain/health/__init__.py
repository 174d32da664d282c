"""Whether a job is learning and whether it is alive: the learning verdict, its rules, and hung-run messages."""
