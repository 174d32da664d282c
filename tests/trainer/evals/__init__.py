"""Tests of trainer/evals/."""
