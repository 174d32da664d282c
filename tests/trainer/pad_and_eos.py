"""How a tokenizer's pad and EOS relate as Tunix's sampler and learner see them (trainer/rollout/stop_token.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

CHAT = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "What is 2 + 3?"}]


def pad_and_eos(tokenizer: Any) -> dict[str, Any]:
    """Tunix's pad and EOS ids for this tokenizer, and what each mask makes of a left-padded chat prompt."""
    from tunix.generate.tokenizer_adapter import TokenizerAdapter

    from trainer.rollout.stop_token import left_padding_mask

    pad_token = tokenizer.pad_token
    try:
        adapter = TokenizerAdapter(tokenizer)
        pad, eos = int(adapter.pad_id()), int(adapter.eos_id())
    finally:
        tokenizer.pad_token = pad_token  # pad_id() sets pad := EOS on a tokenizer without a pad token
    text = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])  # the template wrote its own BOS
    padded = np.asarray([[pad] * 8 + ids])
    return {
        "pad": pad,
        "eos": eos,
        "pad_ids_in_prompt": ids.count(pad),
        "tokens_tunix_masks_in": int((padded != pad).sum()),  # Tunix 0.1.7: every mask is `ids != pad_id`
        "tokens_rljob_masks_in": int(np.asarray(left_padding_mask(padded, pad)).sum()),
        "prompt_tokens": len(ids),
    }
