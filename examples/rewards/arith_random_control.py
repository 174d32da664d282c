"""The control arm's reward: 0/1 at random with a fixed success rate, blind to correctness.

A controlled experiment compares GRPO with examples/rewards/arith_correct.py against GRPO with this
reward. Both pay 1.0 at the same base rate, so group statistics (how often a group of 8 is mixed, the
size of the advantages, the KL they pull) match at the start; only the correctness reward tells right
from wrong. Any gain the correctness arm shows beyond this arm's is learning from correctness, not from
the mechanics of GRPO updates.

RATE is the base model's sampled pass@1 at the chosen difficulty and training temperature, measured
by bench/arith_difficulty.py (bench/results/arith_difficulty.json, "choice"). Each reward is drawn
from a SHA-256 of the prompt and the completion: the same pair always gets the same reward (reruns
and MaxText's evaluation agree), and it carries no information about whether the answer is right.
"""

import hashlib

RATE = 0.2125  # bench/results/arith_difficulty.json, "choice": pass@1 of one-digit products at temperature 0.7


def random_reward(prompt, completion, rate=RATE):
    """1.0 for a fraction `rate` of (prompt, completion) pairs, chosen by their hash."""
    digest = hashlib.sha256(f"{prompt}\x00{completion}".encode()).digest()
    # The first 8 bytes as a uniform draw in [0, 1).
    return 1.0 if int.from_bytes(digest[:8], "big") / 2**64 < rate else 0.0


def arith_random_control(prompts, completions, tmvp_config, answer=None, **kwargs):
    """RATE-probability 1.0 per completion, fixed by the hash of its prompt and text; `answer` is unused."""
    return [random_reward(p, c) for p, c in zip(prompts, completions, strict=True)]
