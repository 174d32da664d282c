"""Tests of service/adapters/store/."""
