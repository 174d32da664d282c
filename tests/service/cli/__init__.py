"""Tests of service/cli/."""
