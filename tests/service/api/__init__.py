"""Tests of service/api/."""
