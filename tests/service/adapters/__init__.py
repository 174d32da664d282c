"""Tests of service/adapters/."""
