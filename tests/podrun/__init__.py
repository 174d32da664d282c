"""Tests of the emulated cluster (harness/podrun): its kubelet, Job/JobSet controllers and Kueue."""
