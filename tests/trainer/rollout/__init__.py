"""Tests of trainer/rollout/."""
