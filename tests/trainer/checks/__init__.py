"""Tests of trainer/checks/."""
