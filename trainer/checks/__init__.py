"""Checks that run as their own processes (torch, transformers) through runner.py."""
