"""The control plane under load: the read path, SSE, replicas, idle CPU, a hostile team, kills, schema fuzzing, the
job page (bench/control_plane/README.md)."""
