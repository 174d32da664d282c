"""What a job costs and may cost: usage, goodput, placement, storage, team budgets, estimates and checkpoint retention."""
