"""The service's estimates (run time, memory fit) against what runs measured (bench/estimate/README.md)."""
