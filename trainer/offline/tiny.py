"""Offline tiny model, tokenizer and GSM8K-format data for running the whole pipeline on CPU.

Nothing here touches a hub: the tokenizer is rebuilt from the Llama 3 BPE ranks the maxtext wheel
ships, the model is a randomly initialised Llama-3.1-architecture checkpoint small enough to train
on two cores (or, with family "qwen3", a Qwen3 dense one: tiny_qwen3.py), and the dataset rows are
generated arithmetic word problems in GSM8K's format.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

# Llama 3's pre-tokenizer split pattern (from Meta's tokenizer.json); the tiktoken file holds only ranks.
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
LLAMA3_NUM_BASE_TOKENS = 128000
LLAMA3_NUM_RESERVED = 256
BOS, EOS, PAD = "<|begin_of_text|>", "<|eot_id|>", "<|finetune_right_pad_id|>"
# Ids 128000..128010 have names in Llama 3.1; the rest of the 256 reserved slots are numbered fillers.
_NAMED_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
]
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

# MaxText-side dimensions matching TINY_LLAMA_CONFIG; used by examples/tiny-cpu.yaml.
TINY_DIMS = {
    "base_emb_dim": 64,
    "base_num_query_heads": 4,
    "base_num_kv_heads": 2,
    "base_num_decoder_layers": 2,
    "base_mlp_dim": 128,
    "head_dim": 16,
}

LENGTH_REWARD_SOURCE = '''"""A reward with variance even for a random model: longer completions score higher.

GRPO's advantages are zero when every completion of a prompt scores the same (a random model never
solves GSM8K), so the weights would not move; this reward makes a training run observably learn.
Signature per MaxText's reward_functions_path contract.
"""


def completion_length_reward(prompts, completions, tmvp_config, **kwargs):
    return [len(completion) / 512.0 for completion in completions]
'''


def llama3_special_tokens() -> dict[str, int]:
    names = list(_NAMED_SPECIALS)
    next_reserved = 3
    while len(names) < LLAMA3_NUM_RESERVED:
        names.append(f"<|reserved_special_token_{next_reserved}|>")
        next_reserved += 1
    return {name: LLAMA3_NUM_BASE_TOKENS + i for i, name in enumerate(names)}


def build_llama3_tokenizer(out_dir: Path) -> None:
    """Write a Llama-3.1 fast tokenizer (ids identical to Meta's) built from maxtext's tiktoken file."""
    import maxtext
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.tiktoken import convert_tiktoken_to_fast

    ranks_file = Path(maxtext.__file__).parent / "assets" / "tokenizers" / "tokenizer_llama3.tiktoken"
    specials = llama3_special_tokens()
    encoding = tiktoken.Encoding(
        name="llama3",
        pat_str=LLAMA3_PATTERN,
        mergeable_ranks=load_tiktoken_bpe(str(ranks_file)),
        special_tokens=specials,
    )
    staging = out_dir / ".tokenizer-staging"
    convert_tiktoken_to_fast(encoding, str(staging))
    tok = PreTrainedTokenizerFast(tokenizer_file=str(staging / "tokenizer.json"))
    # Meta's tokenizer prepends <|begin_of_text|> to every encoded text; the chat template relies on it.
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS}:0 $A:0", pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1", special_tokens=[(BOS, specials[BOS])]
    )
    tok.bos_token, tok.eos_token, tok.pad_token = BOS, EOS, PAD
    tok.chat_template = CHAT_TEMPLATE
    tok.model_max_length = 131072
    tok.save_pretrained(str(out_dir))
    for path in sorted(staging.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    staging.rmdir()


def build_tiny_llama(out_dir: Path, seed: int = 0) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    specials = llama3_special_tokens()
    config = LlamaConfig(
        vocab_size=LLAMA3_NUM_BASE_TOKENS + LLAMA3_NUM_RESERVED,
        hidden_size=TINY_DIMS["base_emb_dim"],
        intermediate_size=TINY_DIMS["base_mlp_dim"],
        num_hidden_layers=TINY_DIMS["base_num_decoder_layers"],
        num_attention_heads=TINY_DIMS["base_num_query_heads"],
        num_key_value_heads=TINY_DIMS["base_num_kv_heads"],
        head_dim=TINY_DIMS["head_dim"],
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        tie_word_embeddings=False,
        bos_token_id=specials[BOS],
        eos_token_id=specials[EOS],
        pad_token_id=specials[PAD],
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out_dir), safe_serialization=True)


def gsm8k_style_rows(count: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    names = ["Ada", "Ben", "Cleo", "Dev", "Ema", "Finn", "Gus", "Hana"]
    items = ["apples", "books", "coins", "pencils", "stamps", "marbles"]
    rows = []
    for _ in range(count):
        name, item = rng.choice(names), rng.choice(items)
        have, more, lose = rng.randint(2, 40), rng.randint(1, 30), rng.randint(0, 10)
        total = have + more - lose
        question = f"{name} has {have} {item}, gets {more} more and then gives away {lose}. How many {item} does {name} have now?"
        answer = f"{name} has {have} + {more} = {have + more} {item}, then {have + more} - {lose} = {total}.\n#### {total}"
        rows.append({"question": question, "answer": answer})
    return rows


def write_rows(rows: list[dict[str, str]], stem: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), str(stem.with_suffix(".parquet")))
    stem.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


TINY_FAMILIES = ("llama", "qwen3")


def make_tiny(out: Path, *, family: str = "llama", train_rows: int = 32, test_rows: int = 8) -> dict[str, str]:
    """Build everything examples/tiny-cpu.yaml needs under `out`; returns the paths written. `family` picks the
    model and tokenizer: a Llama 3.1-architecture one (here) or a Qwen3 dense one (tiny_qwen3.py)."""
    if family not in TINY_FAMILIES:
        raise ValueError(f"family must be one of {', '.join(TINY_FAMILIES)}, got {family!r}")
    out = out.resolve()
    model_dir, data_dir = out / "model", out / "data"
    model_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    if family == "qwen3":
        from .tiny_qwen3 import build_qwen3_tokenizer, build_tiny_qwen3

        build_tiny_qwen3(model_dir, TINY_DIMS)
        build_qwen3_tokenizer(model_dir)
    else:
        build_tiny_llama(model_dir)
        build_llama3_tokenizer(model_dir)
    write_rows(gsm8k_style_rows(train_rows, seed=1), data_dir / "train")
    write_rows(gsm8k_style_rows(test_rows, seed=2), data_dir / "test")
    rewards = out / "length_reward.py"
    rewards.write_text(LENGTH_REWARD_SOURCE)
    return {"model": str(model_dir), "data": str(data_dir), "rewards": str(rewards)}
