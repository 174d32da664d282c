"""What a launcher told its sink, for the local-launcher tests (the monitor thread and the test both call)."""

from __future__ import annotations

import threading

from service.domain.records.ports import Observation, ObservedState


class Recorder:
    def __init__(self) -> None:
        self.observations: list[Observation] = []
        self._lock = threading.Lock()

    def __call__(self, obs: Observation) -> None:
        with self._lock:
            self.observations.append(obs)

    def of(self, job_id: str) -> list[Observation]:
        with self._lock:
            return [o for o in self.observations if o.job_id == job_id]

    def states(self, job_id: str) -> list[ObservedState]:
        return [o.state for o in self.of(job_id)]

    def last(self, job_id: str) -> Observation | None:
        seen = self.of(job_id)
        return seen[-1] if seen else None

    def queues(self, job_id: str) -> list[tuple[int | None, str]]:
        return [(o.queue.position, o.queue.reason) for o in self.of(job_id) if o.queue is not None]
