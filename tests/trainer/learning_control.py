"""Helpers for the controlled learning experiment (test_slow_learning.py); also runnable by hand.

The tiny model is random, so nearly every token is as likely as any other: a reward for one token
would almost never pay, and GRPO would see zero advantages. Sampling with a small top-k (as the
rollout does, `grpo.top_k`) restricts each step to a few candidates, so some token appears often
enough to be rewarded. The target is the most frequent word-like token in the base model's own
samples, chosen before training, so its base rate is known and neither arm is favoured.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

TOP_K = 4
NEW_TOKENS = 32
TEMPERATURE = 1.0
CONSTANT_REWARD = 0.4375  # exact in binary; no MaxText default reward can produce it on every completion

TARGET_REWARD_SOURCE = '''"""Pays for one chosen token's text in the completion (rljob's controlled learning test)."""

TARGET = {target!r}


def target_token_reward(prompts, completions, tmvp_config, **kwargs):
    return [float(completion.count(TARGET)) for completion in completions]
'''

CONSTANT_REWARD_SOURCE = f'''"""The same reward for every completion: GRPO's advantages are all zero (the control arm)."""


def constant_reward(prompts, completions, tmvp_config, **kwargs):
    return [{CONSTANT_REWARD!r} for _ in completions]
'''


def rollout_prompts(tokenizer, questions: list[str]) -> list[str]:
    """Prompts as train_rl builds them: MaxText's GSM8K template inside the tokenizer's chat template."""
    import importlib.util

    root = Path(importlib.util.find_spec("maxtext").origin).parent
    template = json.loads((root / "examples" / "chat_templates" / "gsm8k_rl.json").read_text())
    system = template["SYSTEM_PROMPT"].format(
        reasoning_start_token="<reasoning>",
        reasoning_end_token="</reasoning>",
        solution_start_token="<answer>",
        solution_end_token="</answer>",
    )
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": template["TEMPLATE"].format(system_prompt=system, question=q)}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for q in questions
    ]


def sample_completions(model_dir: str, prompts: list[str], *, per_prompt: int, seed: int) -> list[str]:
    """Top-k samples from Hugging Face's `generate` (the target is chosen from these: test_slow_learning.py)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    torch.manual_seed(seed)
    batch = tokenizer([p for p in prompts for _ in range(per_prompt)], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(
            **batch, do_sample=True, top_k=TOP_K, temperature=TEMPERATURE, max_new_tokens=NEW_TOKENS, pad_token_id=tokenizer.pad_token_id
        )
    return tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)


def sample_top_k(model_dir: str, prompts: list[str], *, per_prompt: int, seed: int) -> list[str]:
    """Top-k sampling from the Hugging Face model, one token at a time with its KV cache, as `generate` samples.

    Not `generate` itself: it draws from all 128,256 tokens of the vocabulary with `torch.multinomial`, most of them
    masked to zero, which took three quarters of its time on the tiny model (0.3 s a step for 64 rows); drawing
    among the top k is the same distribution. A row that wrote EOS gets pad from then on, as `generate` does."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(seed)
    batch = tokenizer([p for p in prompts for _ in range(per_prompt)], return_tensors="pt", padding=True, add_special_tokens=False)
    mask = batch["attention_mask"]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    done = torch.zeros(mask.shape[0], dtype=torch.bool)
    written = []
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=mask, position_ids=positions, use_cache=True)
        for _ in range(NEW_TOKENS):
            top = torch.topk(out.logits[:, -1, :].float() / TEMPERATURE, TOP_K)
            pick = torch.multinomial(torch.softmax(top.values, dim=-1), 1, generator=generator)
            token = torch.where(done[:, None], torch.full_like(pick, pad), top.indices.gather(-1, pick))
            written.append(token)
            done |= token[:, 0] == eos
            mask = torch.cat([mask, torch.ones_like(token)], dim=-1)
            positions = positions[:, -1:] + 1
            out = model(input_ids=token, attention_mask=mask, position_ids=positions, past_key_values=out.past_key_values, use_cache=True)
    return tokenizer.batch_decode(torch.cat(written, dim=-1), skip_special_tokens=True)


def choose_target(completions: list[str], tokenizer) -> str:
    """The most frequent token text of 3+ letters in the base model's samples (word-like, so counting
    its text in a completion rarely counts a different token)."""
    counts: Counter[str] = Counter()
    for text in completions:
        for token_id in tokenizer(text, add_special_tokens=False)["input_ids"]:
            piece = tokenizer.decode([token_id])
            if re.fullmatch(r" ?[A-Za-z]{3,}", piece):
                counts[piece] += 1
    if not counts:
        raise AssertionError("the base model's samples contain no word-like token to reward")
    return counts.most_common(1)[0][0]


def target_rate(completions: list[str], target: str) -> float:
    """Occurrences of the target per completion."""
    return sum(c.count(target) for c in completions) / max(1, len(completions))
