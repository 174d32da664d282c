"""Tests of service/domain/rounds/."""
