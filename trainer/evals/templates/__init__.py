"""Prompt templates the built-in eval suites ship (package data: a directory without this file is left out of the wheel)."""
