"""In-process entry points that prepare MaxText's own modules and then run them unmodified.

Each is started as `python -m trainer.maxtext_entry.<name> <maxtext args>` by runner.py, never
imported into the pipeline process: JAX state and memory stay in the stage's own process.
"""

import faulthandler
import signal
import sys

from trainer.rewards_sandbox.process_privacy import hide_from_same_user

# Every stage process holds the job's secrets in its environment, and on the local launcher another job's reward
# worker runs as the same user beside it: not dumpable, so that worker cannot read them (process_privacy.py).
hide_from_same_user()

# SIGUSR1 prints the Python stacks of every thread of this stage process on stderr, which runner.py copies into the
# stage log: the trainer's hang watchdog (trainer/hang_watchdog.py) sends it before it stops a hung stage. Not chained:
# no other handler of SIGUSR1 exists in MaxText or JAX, and its default would end the process before the stacks.
# The process's own stderr (sys.__stderr__): faulthandler needs a file descriptor, and a replaced sys.stderr (pytest's
# capsys, when a test imports this package) has none, which made the import itself raise.
# (sys.__stderr__ is None only in a process started without one.)
faulthandler.register(signal.SIGUSR1, file=sys.__stderr__ or sys.stderr, all_threads=True, chain=False)
