"""The leader's rounds over stored jobs: recovery, progress polling, attached evals, budgets and checkpoint expiry."""
