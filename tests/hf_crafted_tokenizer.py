#!/usr/bin/env python3
"""Writes a small byte-level BPE tokenizer.json (and its tokenizer_config.json) into DIR, in
Hugging Face's format, for the hostile cases of tests/hostile_files.sh. Every byte is its own
token, id = the byte (GPT-2's printable spelling); the end of document "<|endoftext|>" is the
added token 256. Usage: hf_crafted_tokenizer.py DIR KIND
  plain         no pre-tokenizer regex, no merges
  big-id        one vocabulary entry of id 2^27
  many-added    50,000 added tokens "a0" .. "a49999", all starting with "a"
  nul-added     an added token "a\\0b" (id 257)
  backtrack     a Split regex (a|aa)+b, which backtracks exponentially on a run of a's
  hex           a Split regex \\h+ (Oniguruma: a hexadecimal digit), the merge "Ġ z" (id 257)
  u-escape      a Split regex \\u0041+ (Oniguruma's \\u: "A"), the merge "A A" (id 257)
  word          a Split regex \\w+|\\W (Oniguruma: a mark is a word character), the merge "e Ì"
                (e and the first byte of U+0301; id 257)
  lookahead     a Split regex (?=[A-Z]) (empty matches split), the merge "Ġ C" (id 257)
  boundary      a Split regex \\b (between word characters, marks included, and the rest), the
                merge of U+0301's last byte and a space (id 257)
  order         merges "ab a" (id 258) before "a b" (id 257): not in training order
  dup-merge     merges "a b" (257), "b c" (258), "a b" again
  dup-vocab     the key "ab" twice, ids 257 and 258, the merge "a b"
  prefix-split  a Split, then ByteLevel with add_prefix_space (refused)
  split-after   ByteLevel, then a Split (refused)
  no-prefix     a ByteLevel without add_prefix_space (refused)
  unk           characters a-d and "\u2581" (ids 3-7) with <unk> fused, no bytes"""
import json
import os
import sys


def byte_spelling():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    out, kind = sys.argv[1], sys.argv[2]
    sp = byte_spelling()
    vocab = {sp[b]: b for b in range(256)}
    merges = []
    added = [{"id": 256, "content": "<|endoftext|>", "special": True}]
    pre = [{"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]
    if kind == "big-id":
        vocab["x" + sp[0x20]] = 1 << 27
    elif kind == "many-added":
        added += [{"id": 257 + k, "content": "a%d" % k} for k in range(50000)]
    elif kind == "nul-added":
        added.append({"id": 257, "content": "a\0b"})
    elif kind == "backtrack":
        pre.insert(0, {"type": "Split", "pattern": {"Regex": "(a|aa)+b"}, "behavior": "Isolated"})
    elif kind == "hex":
        pre.insert(0, {"type": "Split", "pattern": {"Regex": "\\h+"}, "behavior": "Isolated"})
        vocab[sp[0x20] + "z"] = 257
        merges.append(sp[0x20] + " z")
    elif kind == "u-escape":
        pre.insert(0, {"type": "Split", "pattern": {"Regex": "\\u0041+"}, "behavior": "Isolated"})
        vocab["AA"] = 257
        merges.append("A A")
    elif kind in ("word", "lookahead", "boundary"):
        regex = {"word": "\\w+|\\W", "lookahead": "(?=[A-Z])", "boundary": "\\b"}[kind]
        pair = {"word": ("e", sp[0xCC]), "lookahead": (sp[0x20], "C"),
                "boundary": (sp[0x81], sp[0x20])}[kind]
        pre.insert(0, {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated"})
        vocab[pair[0] + pair[1]] = 257
        merges.append(pair[0] + " " + pair[1])
    elif kind == "order":
        vocab.update({"ab": 257, "aba": 258})
        merges += ["ab a", "a b"]
    elif kind == "dup-merge":
        vocab.update({"ab": 257, "bc": 258})
        merges += ["a b", "b c", "a b"]
    elif kind == "dup-vocab":
        vocab.update({"ab": 257, "DUP": 258})  # DUP is spelt "ab" below: a key listed twice
        merges.append("a b")
    elif kind == "prefix-split":
        pre = [{"type": "Split", "pattern": {"Regex": "\\s+|\\w+|[^\\s\\w]+"}, "behavior": "Isolated"},
               {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}]
    elif kind == "split-after":
        pre.append({"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"})
    elif kind == "no-prefix":
        pre = [{"type": "ByteLevel", "use_regex": False}]
    elif kind == "unk":
        vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "c": 5, "d": 6, "\u2581": 7}
        added = [{"id": k, "content": t, "special": True} for k, t in enumerate(["<unk>", "<s>", "</s>"])]
        pre = None
    elif kind != "plain":
        sys.exit("unknown kind " + kind)
    for a in added:
        a.setdefault("special", False)
        a.update({"single_word": False, "lstrip": False, "rstrip": False, "normalized": False})
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None,
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre} if pre else None,
           "post_processor": None, "decoder": {"type": "ByteLevel"} if pre else None,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                     "vocab": vocab, "merges": merges}}
    if kind == "unk":
        tok["model"].update({"unk_token": "<unk>", "fuse_unk": True})
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        f.write(json.dumps(tok).replace('"DUP"', '"ab"'))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        if kind == "unk":
            json.dump({"eos_token": "</s>", "bos_token": "<s>"}, f)
        else:
            json.dump({"eos_token": "<|endoftext|>", "bos_token": None}, f)


main()
