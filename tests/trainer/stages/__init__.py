"""Tests of trainer/stages/."""
