"""Tests of service/domain/cost/."""
