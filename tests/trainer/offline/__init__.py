"""Tests of trainer/offline/."""
