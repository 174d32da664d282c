import sys

from trainer.rewards_sandbox.process_privacy import hide_from_same_user

# First, before any stage or reward worker starts: in a pod this process is PID 1 and its environment holds the
# job's secrets (HF token, credentials); a reward worker runs as the same user (process_privacy.py says why).
hide_from_same_user()

from trainer.cli import main  # noqa: E402 - after the line above, by intent

sys.exit(main())
