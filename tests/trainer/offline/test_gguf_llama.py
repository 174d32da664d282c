"""trainer/offline/gguf_llama.py on a tiny Llama GGUF written here (Q4_1 projections, a Q8_0 embedding, as
SmolLM2's file has): the numpy tensors are bit for bit transformers' torch-based reader's, and a file that is not
the Llama its metadata says is refused with a message naming what differs. The real 98 MB file is compared in
tests/trainer/offline/test_slow_smollm2.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.offline.gguf_llama import GgufUnfit, LlamaShape, hf_name, llama_tensors, unpermute_rows

LAYERS, HIDDEN, INNER, HEADS, KV_HEADS, VOCAB = 2, 64, 96, 4, 2, 96  # projections: multiples of Q4_1's 32-block


def _gguf_tensors(*, tied: bool) -> dict[str, tuple[tuple[int, ...], str]]:
    head_dim = HIDDEN // HEADS
    tensors = {"token_embd.weight": ((VOCAB, HIDDEN), "Q8_0"), "output_norm.weight": ((HIDDEN,), "F32")}
    if not tied:
        tensors["output.weight"] = ((VOCAB, HIDDEN), "Q8_0")
    for block in range(LAYERS):
        tensors |= {
            f"blk.{block}.attn_norm.weight": ((HIDDEN,), "F32"),
            f"blk.{block}.attn_q.weight": ((HEADS * head_dim, HIDDEN), "Q4_1"),
            f"blk.{block}.attn_k.weight": ((KV_HEADS * head_dim, HIDDEN), "Q4_1"),
            f"blk.{block}.attn_v.weight": ((KV_HEADS * head_dim, HIDDEN), "Q4_1"),
            f"blk.{block}.attn_output.weight": ((HIDDEN, HEADS * head_dim), "Q4_1"),
            f"blk.{block}.ffn_norm.weight": ((HIDDEN,), "F32"),
            f"blk.{block}.ffn_gate.weight": ((INNER, HIDDEN), "Q4_1"),
            f"blk.{block}.ffn_up.weight": ((INNER, HIDDEN), "Q4_1"),
            f"blk.{block}.ffn_down.weight": ((HIDDEN, INNER), "Q4_1"),
        }
    return tensors


def write_tiny_llama_gguf(path: Path, *, tied: bool = True, drop: str | None = None, extra: str | None = None) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(INNER)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(VOCAB)
    rng = np.random.default_rng(0)
    tensors = _gguf_tensors(tied=tied)
    if extra:
        tensors[extra] = ((HIDDEN,), "F32")
    for name, (shape, kind) in tensors.items():
        if name == drop:
            continue
        values = rng.standard_normal(shape, dtype=np.float32)
        qtype = gguf.GGMLQuantizationType[kind]
        data = values if kind == "F32" else gguf.quants.quantize(values, qtype)
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _shape(tied: bool) -> LlamaShape:
    return LlamaShape(
        hidden_size=HIDDEN,
        intermediate_size=INNER,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HIDDEN // HEADS,
        vocab_size=VOCAB,
        tie_word_embeddings=tied,
    )


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_numpy_tensors_are_transformers_gguf_readers_bit_for_bit(tmp_path, tied):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = write_tiny_llama_gguf(tmp_path / "tiny.gguf", tied=tied)
    read = load_gguf_checkpoint(str(path))["config"]
    config = LlamaConfig(**{k: v for k, v in read.items() if k not in ("model_type", "_model_name_or_path")})
    assert config.tie_word_embeddings is tied
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(config)
    reference = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=skeleton)["tensors"]

    ours = llama_tensors(path, LlamaShape.of(config.to_dict()))

    assert LlamaShape.of(config.to_dict()) == _shape(tied)
    assert sorted(ours) == sorted(reference) and len(ours) == 2 + 9 * LAYERS + (0 if tied else 1)
    for name, tensor in reference.items():
        expected = tensor.numpy()
        assert ours[name].dtype == expected.dtype == np.float32 and ours[name].shape == expected.shape, name
        assert np.array_equal(ours[name].view(np.uint32), expected.view(np.uint32)), name


def test_unpermute_rows_inverts_llama_cpps_permute():
    def permute(weights: np.ndarray, n_head: int) -> np.ndarray:  # llama.cpp convert_hf_to_gguf.py, LlamaModel.permute
        return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)

    rows = np.arange(KV_HEADS * 16 * 3, dtype=np.float32).reshape(KV_HEADS * 16, 3)
    assert not np.array_equal(permute(rows, KV_HEADS), rows)
    assert np.array_equal(unpermute_rows(permute(rows, KV_HEADS), KV_HEADS), rows)


def test_gguf_names_map_to_hf_llama_names():
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight"
    assert hf_name("blk.0.ffn_norm.weight") == "model.layers.0.post_attention_layernorm.weight"
    assert hf_name("output_norm.weight") == "model.norm.weight"
    assert hf_name("rope_freqs.weight") is None and hf_name("blk.0.attn_qkv.weight") is None


def test_a_missing_tensor_is_named(tmp_path):
    path = write_tiny_llama_gguf(tmp_path / "short.gguf", drop="blk.1.ffn_up.weight")
    with pytest.raises(GgufUnfit, match=r"missing \['model.layers.1.mlp.up_proj.weight'\]"):
        llama_tensors(path, _shape(tied=True))


def test_a_tensor_with_no_hf_name_is_named(tmp_path):
    path = write_tiny_llama_gguf(tmp_path / "extra.gguf", extra="rope_freqs.weight")
    with pytest.raises(GgufUnfit, match=r"tensors with no HF name \['rope_freqs.weight'\]"):
        llama_tensors(path, _shape(tied=True))


def test_a_shape_the_metadata_does_not_describe_is_named(tmp_path):
    path = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    with pytest.raises(GgufUnfit, match=r"'model.embed_tokens.weight': \(\(96, 64\), \(128, 64\)\)"):
        llama_tensors(path, LlamaShape(**{**_shape(tied=True).__dict__, "vocab_size": 128}))


def test_make_model_refuses_a_gguf_that_is_not_smollm2_without_a_traceback(tmp_path, monkeypatch, capsys):
    from trainer import cli
    from trainer.offline import smollm2

    path = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    monkeypatch.setattr(smollm2, "gguf_path", lambda: path)

    assert cli.main(["make-model", "smollm2-135m", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"make-model: {path} is not SmolLM2-135M") and "'num_hidden_layers': (2, 30)" in err
    assert not (tmp_path / "out").exists()
