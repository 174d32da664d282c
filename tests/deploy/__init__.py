"""Tests of what is deployed: docker/, k8s/ rendered and validated, the service pod run on the emulated cluster."""
