"""Evaluations: eval jobs, the evals attached to a training job, suite versions, comparisons and their views."""
