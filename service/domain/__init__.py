"""The service's domain: records, phases, policies and the job service (no framework, no adapter)."""
