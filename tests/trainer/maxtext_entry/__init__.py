"""Tests of trainer/maxtext_entry/."""
