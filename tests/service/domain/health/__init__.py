"""Tests of service/domain/health/."""
