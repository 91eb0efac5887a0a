#!/usr/bin/env python3
"""Writes the tokenizer test fixtures (tests/tokenizer/*.json) from HF `tokenizers` itself.

Run from the repository root with the project venv:
    /work/venv/bin/python tests/tokenizer/make_fixtures.py [SHARED_DIR]
SHARED_DIR defaults to $KVQ_SHARED or ../shared. Outputs (all committed):
  heldout_start.txt          first lines of shared/data/heldout-books.txt (bundled-model test)
  sp_legacy.json, sp_metaspace.json, bl_*.json
                             small tokenizers built here with `tokenizers` (SentencePiece-style
                             Metaspace + byte_fallback, and byte-level variants exercising Split
                             behaviours, added-token flags, normalizers, ignore_merges)
  fx_<name>.json             {"cases": [{text, add_special, ids, decoded, decoded_all[, each]}]}:
                             HF's encode ids, decode(skip_special_tokens=True/False) strings, and
                             for the mixed text each id decoded alone
  heldout_full.json          id count + sha256 of the int32-LE id stream of the whole heldout
                             text for each kvq model and Qwen3 (HF encode, no special tokens)
  fx_llama2c.json            ids from run.c's encode()/decode() transcribed below (reads tok512.bin)
"""
import hashlib
import json
import os
import random
import struct
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KVQ_SHARED", "../shared")

SHORT = [
    "", " ", "a", "Hello world", "Hello  world", "  leading", "trailing  ", "\n", "\n\n x \n",
    "Once upon a time", "don't STOP", "x<|im_start|>y", "<|endoftext|>", "<s>hi</s>", " <s> hi",
    "é e\u0301", "日本", "😀!", "a\tb\r\nc", "1234567", "hello hello! Hello,hello", "[MASK] x  [MASK]y",
    "a <sep>   b", "ﬁne ＦＵＬＬ", "   ", "▁already▁metaspace", "a hello  x b HeLLo  X", "hellohello hello_x",
]


# random texts from fragments that stress the pipeline's edges (seeded, so fixtures are stable)
FRAGS = [" ", "  ", "   ", "\n", "\n\n", "\r\n", "\t", "a", "Hello", "world", "the", "'s", "'LL", "don't", "123", "4567",
         "9", "é", "e\u0301", "ñ", "ß", "İ", "日本語", "中", "😀", "👍🏽", "\u200d", "🇫🇷", "!", "?!", "...", ",", "-", "_",
         "(", ")", "{}", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<s>", "</s>", "<unk>",
         "[MASK]", "<sep>", "hello", "HeLLo  X", "ﬁ", "Ｆ", "½", "▁", "▁▁", "<0x41>", "\u00a0", "\u3000", "\u2028", "x",
         "Z", "ü", "Ω", "ς", "Σ", "\x01", "\x7f", "#", "$5", "0x1F", "<tool_call>", "<|fim_prefix|>", "  <s>  ", "\u0300",
         "a\u0308", "Å", "카", "ｶ", "ﾞ"]
N_RANDOM = 100


def random_cases(seed):
    r = random.Random(seed)
    return [("".join(r.choice(FRAGS) for _ in range(r.randint(0, 12))), r.random() < 0.3) for _ in range(N_RANDOM)]


def write_json(name, obj):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=0)
        f.write("\n")


def cases_for(tok, texts):
    out = []
    pairs = [(t, a) for t in texts for a in (False, True)] + random_cases(1)
    for text, add in pairs:
        if True:
            ids = tok.encode(text, add_special_tokens=add).ids
            out.append({
                "text": text, "add_special": add, "ids": ids,
                "decoded": tok.decode(ids, skip_special_tokens=True),
                "decoded_all": tok.decode(ids, skip_special_tokens=False),
            })
            if text == texts[0] and not add and len(out) == 1:  # each id alone: partial UTF-8 -> U+FFFD as HF
                out[-1]["each"] = [tok.decode([i], skip_special_tokens=False) for i in ids]
    return out


def fixture(name, tok_path, texts):
    tok = Tokenizer.from_file(tok_path)
    write_json("fx_%s.json" % name, {"tokenizer": os.path.relpath(tok_path, HERE) if tok_path.startswith(HERE) else tok_path,
                                      "cases": cases_for(tok, texts)})


# ---------------------------------------------------------------- small tokenizers built here

def training_lines(heldout):
    return heldout[:200000].split("\n")


def build_sp(lines):
    """SentencePiece-style BPE: Metaspace words, byte_fallback with <0xXX> tokens at ids 3..258."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tr = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                             limit_alphabet=120)
    tok.train_from_iterator(lines, tr)
    j = json.loads(tok.to_str())
    old = j["model"]["vocab"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for t, i in sorted(old.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    j["model"]["vocab"] = vocab
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
    return j


def sp_variants(base):
    bos_eos = {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}, "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}
    # Llama-2 / Mistral v0.1 tokenizer.json: normalizer does the prefix and spaces, "a b" merges
    legacy = json.loads(json.dumps(base))
    legacy["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    legacy["pre_tokenizer"] = None
    legacy["model"]["merges"] = [" ".join(m) for m in legacy["model"]["merges"]]
    legacy["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    legacy["post_processor"] = {"type": "TemplateProcessing",
                                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                                "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                         {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                "special_tokens": {"<s>": bos_eos["<s>"]}}
    # newer conversions: Metaspace pre-tokenizer (prepend "first", no split), pair-form merges
    meta = json.loads(json.dumps(base))
    meta["normalizer"] = None
    meta["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    meta["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
        {"type": "Fuse"}]}
    meta["post_processor"] = {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                         {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": bos_eos}
    # Metaspace with split and "always" (T5-like), plus an NFKC normalizer
    split = json.loads(json.dumps(base))
    split["normalizer"] = {"type": "NFKC"}
    split["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    split["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    split["post_processor"] = None
    return {"sp_legacy": legacy, "sp_metaspace": meta, "sp_split": split}


def build_bl(lines):
    """Small byte-level BPE, with extra added tokens carrying lstrip/rstrip/single_word/normalized."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tr = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator(lines, tr)
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=False, normalized=False, special=True)])
    tok.add_tokens([AddedToken("hello", single_word=True, normalized=True),
                    AddedToken("<sep>", rstrip=True, lstrip=False, normalized=False),
                    AddedToken("ﬁ", normalized=True), AddedToken("HeLLo  X", normalized=True)])
    tok.decoder = decoders.ByteLevel()
    return json.loads(tok.to_str())


def bl_variants(base):
    def v(pre, norm=None, post=None, **model):
        j = json.loads(json.dumps(base))
        j["pre_tokenizer"] = pre
        j["normalizer"] = norm
        j["post_processor"] = post
        j["model"].update(model)
        return j
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    def split(pattern, behavior, invert=False):
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert}, bl]}
    llama3 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
              "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    return {
        "bl_gpt2": v({"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                     post={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}),
        "bl_removed": v(split({"Regex": "\\s+"}, "Removed")),
        "bl_mprev": v(split({"Regex": "[,.!?]"}, "MergedWithPrevious")),
        "bl_mnext": v(split({"String": " "}, "MergedWithNext")),
        "bl_contig": v(split({"Regex": "\\p{N}|\\s"}, "Contiguous")),
        "bl_invert": v(split({"Regex": "\\p{L}+"}, "Isolated", True)),
        "bl_norm": v({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
                     norm={"type": "Sequence", "normalizers": [
                         {"type": "NFKC"}, {"type": "Lowercase"},
                         {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
                         {"type": "Strip", "strip_left": True, "strip_right": True}]}),
        "bl_ignore_merges": v(split({"Regex": llama3}, "Isolated"), ignore_merges=True),
        "bl_digits": v({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, bl]},
                       norm={"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}]}),
        "bl_digits_grouped": v({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": False}, bl]}),
        "bl_whitespace": v({"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}, bl]}),
        "bl_wssplit": v({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, bl]}),
        "bl_punct": v({"type": "Sequence", "pretokenizers": [{"type": "Punctuation", "behavior": "Contiguous"},
                                                              {"type": "Digits", "individual_digits": False}, bl]}),
    }


# ---------------------------------------------------------------- llama2.c run.c, transcribed

def l2c_load(path):
    d = open(path, "rb").read()
    at, vocab, scores = 4, [], []
    while at < len(d):
        score, n = struct.unpack_from("<fi", d, at)
        vocab.append(d[at + 8:at + 8 + n])
        scores.append(score)
        at += 8 + n
    lookup = {}
    for i, v in enumerate(vocab):
        assert v not in lookup, "duplicate token: run.c's bsearch would be ambiguous"
        lookup[v] = i
    return vocab, scores, lookup


def l2c_encode(vocab, scores, lookup, text, bos, eos):
    toks = [1] if bos else []
    if text:
        toks.append(lookup[b" "])
    b = text.encode("utf-8")
    i = 0
    while i < len(b):  # run.c: a byte plus up to 3 continuation bytes, else <0xXX> = byte + 3
        n = 1
        while i + n < len(b) and (b[i + n] & 0xC0) == 0x80 and n < 4:
            n += 1
        s = b[i:i + n]
        toks.extend([lookup[s]] if s in lookup else [c + 3 for c in s])
        i += n
    while True:
        best, bi, bid = -1e10, -1, -1
        for k in range(len(toks) - 1):
            m = lookup.get(vocab[toks[k]] + vocab[toks[k + 1]])
            if m is not None and scores[m] > best:
                best, bi, bid = scores[m], k, m
        if bi < 0:
            break
        toks[bi:bi + 2] = [bid]
    if eos:
        toks.append(2)
    return toks


def l2c_decode(vocab, ids, skip_special):
    out = b""
    for k, t in enumerate(ids):
        prev = ids[k - 1] if k else -1
        if skip_special and t <= 2:
            continue
        piece = vocab[t]
        if prev in (1, -1) and piece[:1] == b" ":  # run.c: after BOS (kvq: also at the start)
            piece = piece[1:]
        if len(piece) == 6 and piece.startswith(b"<0x") and piece.endswith(b">"):
            piece = bytes([int(piece[3:5], 16)])
        out += piece
    return out.decode("utf-8", errors="replace")


def main():
    heldout_path = os.path.join(SHARED, "data", "heldout-books.txt")
    heldout = open(heldout_path, encoding="utf-8").read()
    start = heldout[:3000]
    start = start[:start.rfind("\n") + 1]
    open(os.path.join(HERE, "heldout_start.txt"), "w", encoding="utf-8", newline="").write(start)
    mixed = open(os.path.join(HERE, "text_mixed.txt"), encoding="utf-8", newline="").read()
    texts = [mixed] + SHORT

    lines = training_lines(heldout)
    built = {}
    built.update(sp_variants(build_sp(lines)))
    built.update(bl_variants(build_bl(lines)))
    for name, j in built.items():
        path = os.path.join(HERE, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        Tokenizer.from_file(path)  # HF accepts what we wrote
        fixture(name, path, texts)

    models_dir = os.path.join(SHARED, "models")
    real = {"kvq-tiny-llama": os.path.join(HERE, "..", "models", "kvq-tiny-llama", "tokenizer.json"),
            "kvq-small-llama": os.path.join(models_dir, "kvq-small-llama", "tokenizer.json"),
            "kvq-small-qwen3": os.path.join(models_dir, "kvq-small-qwen3", "tokenizer.json"),
            "qwen3": os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json")}
    full = {}
    for name, path in real.items():
        fixture(name, path, texts)
        ids = Tokenizer.from_file(path).encode(heldout, add_special_tokens=False).ids
        full[name] = {"count": len(ids), "sha256": hashlib.sha256(struct.pack("<%di" % len(ids), *ids)).hexdigest()}
    write_json("heldout_full.json", full)

    vocab, scores, lookup = l2c_load(os.path.join(models_dir, "stories260K", "tok512.bin"))
    l2c_texts = ["Once upon a time", "Once upon a time, there was a little girl named Lily.", "", "a", " x",
                 "Hello, world! 123", "The cat sat.\nThe dog ran.", "café ü 日本 😀", "Lily and Tom  played."]
    cases = []
    for text, bos in [(t, b) for t in l2c_texts for b in (False, True)] + random_cases(2)[:50]:
        if True:
            ids = l2c_encode(vocab, scores, lookup, text, bos, False)
            cases.append({"text": text, "add_special": bos, "ids": ids,
                          "decoded": l2c_decode(vocab, ids, True), "decoded_all": l2c_decode(vocab, ids, False)})
    write_json("fx_llama2c.json", {"tokenizer": "models/stories260K/tok512.bin", "cases": cases})


if __name__ == "__main__":
    main()
