"""Tests of trainer/sizing/."""
