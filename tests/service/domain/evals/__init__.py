"""Tests of service/domain/evals/."""
