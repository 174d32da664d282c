"""Tests of the control service (service/): domain, API, launchers, stores, CLI."""
