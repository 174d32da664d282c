"""Tests of service/domain/records/."""
