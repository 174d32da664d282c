"""Tests of trainer/progress/."""
