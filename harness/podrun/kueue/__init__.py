"""Kueue for the emulated cluster (kubernetes-sigs/kueue v0.19.2, and v0.20.0 where it differs): what upstream's
controllers and webhooks decide, as pure functions over API dicts, and the emulator that runs them on kmock.

    emulator.py     KueueEmulator: the reconcile loop's Kueue pass, its webhook and visibility API on kmock
    reconcile.py    one pass, ordered as Kueue's controllers run (admission checks, queues, Workloads, admission)
    controller.py   the quota, flavor, preemption and queue-order rules
    workload.py     jobframework: the Workload an owner gets, starting and finishing it, CRD schema checks
    podsready.py    waitForPodsReady: eviction, requeue with backoff, the owner stopped
    config.py       the manager's Configuration: what Kueue manages, what its job webhook does on create
    visibility.py   the pending-workloads visibility API
    versions.py     where v0.19.2 and v0.20.0 decide differently
"""
