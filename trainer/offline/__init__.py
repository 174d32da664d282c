"""Inputs built offline, without a hub: the tiny model (tiny.py), SmolLM2-135M from its PyPI GGUF
(smollm2.py), GSM8K rows (gsm8k_rows.py) and arithmetic rows (arith_rows.py). Behind
`python -m trainer make-tiny|make-model|make-data`, the tests and the benches; no job stage imports them.
"""
