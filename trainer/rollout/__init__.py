"""The pure-JAX rollout engine that replaces train_rl's vLLM rollout on CPU: the rollout Tunix calls
(jax_rollout.py), the cached forward it decodes with (cached_llama.py), the decode step's native products
(few_rows_matmul.py over native/few_rows_matmul.cc), each rollout's sampling key (rollout_keys.py) and the stop
token's handling in the loss and the masks (stop_token.py).

Loaded only inside a train or eval stage process, through trainer/maxtext_entry's shims.
"""
