"""Tests of service/domain/webhooks/."""
