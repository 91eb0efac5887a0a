#!/usr/bin/env python3
"""Writes a synthetic Llama checkpoint (random F16 weights, sharded like HF does) to
show that kvq-convert's peak memory follows the largest tensor, not the model:
  /work/venv/bin/python tests/bench/make_synthetic_llama.py /tmp/synth 8
  /usr/bin/time -v build/kvq-convert -q /tmp/synth /tmp/synth.kvq
Usage: make_synthetic_llama.py OUTDIR N_LAYERS"""
import json, os, sys
import numpy as np
from safetensors.numpy import save_file

out, n_layers = sys.argv[1], int(sys.argv[2])
H, F, V, NH = 1024, 4096, 4096, 16
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)
def w(*shape):
    return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)
shards, weight_map = [], {}
def flush(tensors):
    name = f"model-{len(shards) + 1:05d}.safetensors"
    save_file(tensors, os.path.join(out, name), metadata={"format": "pt"})
    shards.append(name)
    for k in tensors: weight_map[k] = name
flush({"model.embed_tokens.weight": w(V, H), "lm_head.weight": w(V, H), "model.norm.weight": np.ones(H, np.float16)})
for l in range(n_layers):
    p = f"model.layers.{l}."
    flush({p + "self_attn.q_proj.weight": w(H, H), p + "self_attn.k_proj.weight": w(H, H),
           p + "self_attn.v_proj.weight": w(H, H), p + "self_attn.o_proj.weight": w(H, H),
           p + "mlp.gate_proj.weight": w(F, H), p + "mlp.up_proj.weight": w(F, H), p + "mlp.down_proj.weight": w(H, F),
           p + "input_layernorm.weight": np.ones(H, np.float16), p + "post_attention_layernorm.weight": np.ones(H, np.float16)})
final = {}
for i, name in enumerate(shards):
    new = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
    os.rename(os.path.join(out, name), os.path.join(out, new))
    final[name] = new
json.dump({"metadata": {}, "weight_map": {k: final[v] for k, v in weight_map.items()}},
          open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=1)
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": F, "num_hidden_layers": n_layers, "num_attention_heads": NH,
           "num_key_value_heads": NH, "vocab_size": V, "max_position_embeddings": 2048,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float16"},
          open(os.path.join(out, "config.json"), "w"), indent=1)
