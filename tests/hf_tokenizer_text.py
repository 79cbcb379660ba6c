#!/usr/bin/env python3
"""Texts for checking a reader of Hugging Face's tokenizer.json against Tokenizers.js, as JSON
lines {"text": ...}: books in paragraphs (with their line breaks and spacing), WikiText-103
articles, and generated Unicode that stresses what the pre-tokenizers and normalizers decide
(letters and digits of many scripts, combining marks in NFD and NFC, every kind of space and
line break, contractions in any case, the tokenizers' added tokens inside words, emoji with
joiners, private-use and astral characters).
Usage: hf_tokenizer_text.py DATA_DIR OUT.jsonl [SEED]"""
import json
import random
import sys
import unicodedata


def books(data, out, limit):
    names = ["pg11-alices-adventures-in-wonderland.txt", "pg2600-war-and-peace.txt",
             "pg2701-moby-dick.txt", "pg345-dracula.txt"]
    for n in names:
        text = open(data + "/books/" + n, encoding="utf-8").read()
        paras = text.split("\n\n")
        chunk = []
        for p in paras:
            chunk.append(p)
            if sum(len(c) for c in chunk) > 4000:
                out.append("\n\n".join(chunk))
                chunk = []
            if sum(len(t) for t in out) > limit * (names.index(n) + 1):
                break


def wikitext(data, out, limit):
    text = open(data + "/wikitext103/wiki.test.tokens", encoding="utf-8").read()
    articles = text.split("\n = ")
    used = 0
    for a in articles[1:]:
        out.append(" = " + a)
        used += len(a)
        if used > limit:
            break


SPACES = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000",
          "\u2007", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff", "\u180e",
          "\u200b", "  ", "\n\n", " \n ", "\t\t"]
WORDS = ["The", "don't", "DON'T", "it's", "IT'S", "we'll", "We'Ve", "I'm", "they'd", "You'RE",
         "naïve", "café", "Straße", "ﬁnance", "İstanbul", "ǅemal", "Ωmega", "東京", "北京大学",
         "한국어", "日本語のテキスト", "русский", "Ελληνικά", "עברית", "العربية", "हिन्दी",
         "ภาษาไทย", "ᚠᚢᚦ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "٣٤٥", "१२३", "Ⅻ", "½", "²³", "①②",
         "1234567", "3.14159", "1,000,000", "0x1F", "e=mc²", "a+b=c", "foo_bar", "C++", "#include",
         "<html>", "</s>", "<|endoftext|>", "<|begin_of_text|>", "<|im_start|>", "<s>", "<unk>",
         "<0x0A>", "▁", "▁▁hi", "👍", "👨‍👩‍👧", "🇫🇷", "🏳️‍🌈", "\U0010fffd", "\ue000", "\ufffd", "𐍈",
         "...", "!!!", "?!", "--", "—", "“quoted”", "‘single’", "«guillemets»", "''", "'", "'s",
         "'S", "'ll", "x's", "ſ", "ſt", "K", "Å"]


def generated(rng, out, n):
    for _ in range(n):
        parts = []
        for _ in range(rng.randrange(5, 60)):
            r = rng.random()
            if r < 0.55:
                w = rng.choice(WORDS)
                form = rng.random()
                if form < 0.15:
                    w = unicodedata.normalize("NFD", w)
                elif form < 0.2:
                    w = w.upper()
                parts.append(w)
            elif r < 0.85:
                parts.append(rng.choice(SPACES))
            else:  # a random code point of the Basic Multilingual Plane or beyond
                cp = 0xD800
                while unicodedata.category(chr(cp)) in ("Cn", "Cs"):
                    # assigned in Python's Unicode (14.0: Debian 12's, as its PCRE2's); later
                    # assignments have properties PCRE2 10.42 does not know
                    cp = rng.choice([rng.randrange(0x20, 0x3000), rng.randrange(0x3000, 0xD800),
                                     rng.randrange(0xE000, 0xFFFE), rng.randrange(0x10000, 0x1FAFF)])
                parts.append(chr(cp) * rng.randrange(1, 4))
        out.append("".join(parts))


def main():
    data, path = sys.argv[1], sys.argv[2]
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    out = []
    books(data, out, 60000)
    wikitext(data, out, 150000)
    generated(rng, out, 400)
    with open(path, "w", encoding="utf-8") as f:
        for t in out:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
