"""Tests of service/domain/."""
