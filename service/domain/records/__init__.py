"""The job record and what it is made of: the record types, phases, errors and ports (imports nothing else of the domain)."""
