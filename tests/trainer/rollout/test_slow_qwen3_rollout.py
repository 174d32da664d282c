"""The jax rollout engine's Qwen3 path (QK-norm, MaxText's half-split RoPE, the query scaled after RoPE, tied
embeddings) against MaxText's own qwen3 forward on the same random weights: logits at every prefill and
decode position, and greedy decoding token for token (tests/trainer/qwen3_rollout_check.py, one subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.trainer.conftest import REPO

pytestmark = pytest.mark.slow


def test_cached_qwen3_forward_matches_maxtexts_qwen3_and_decodes_the_same_greedy_tokens():
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "trainer" / "qwen3_rollout_check.py")],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["family"] == "qwen3" and result["tied"], result
    # The Llama parity's tolerance (test_slow_pipeline.py). Dropping the QK-norm, the Llama RoPE pairing, the
    # query scale, or swapping the query and key norm scales each moves the logits by 8 to 32 here.
    assert result["argmax_agree"] and result["max_abs_diff"] < 1e-4 * max(1.0, result["logit_scale"]), result
    # Every decode step's products ran in few_rows_matmul's kernel (fp32, a row per prompt): per layer q/k/v, out,
    # gate/up, down and attention's scores and values, then the logits; none on a CPU without the kernel's AVX-512F.
    from trainer.rollout.few_rows_matmul import cpu_lacks_instructions

    expected = 0 if cpu_lacks_instructions() else 6 * result["layers"] + 1
    assert result["decode_kernel_calls"] == expected, result
    # Greedy decoding moved on from the prompt: not one token repeated (what a tied random model's residual does).
    assert all(len(set(row)) > 1 for row in result["generated"]), result
