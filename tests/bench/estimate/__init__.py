"""Tests of bench/estimate/."""
