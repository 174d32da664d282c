"""The pure-JAX rollout engine that replaces train_rl's vLLM rollout on CPU: the rollout Tunix calls
(jax_rollout.py), the cached forward it decodes with (cached_llama.py), the decode step's native products
(few_rows_matmul.py over native/few_rows_matmul.cc) and each rollout's sampling key (rollout_keys.py); with them the
stop token's handling in the loss and the masks (stop_token.py), which the train entry installs for either engine.

Loaded only inside a train or eval stage process, through trainer/maxtext_entry's shims.
"""
