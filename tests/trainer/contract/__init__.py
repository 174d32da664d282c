"""Tests of trainer/contract/."""
