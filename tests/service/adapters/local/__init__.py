"""Tests of service/adapters/local/."""
