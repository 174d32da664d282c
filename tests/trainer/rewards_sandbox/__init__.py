"""Tests of trainer/rewards_sandbox/."""
