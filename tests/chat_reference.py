#!/usr/bin/env python3
"""Chat formats against Hugging Face's own rendering (tests/chat.sh).

Generates multi-turn conversations (empty and white-space-heavy content, Unicode with and
without NFC, special-token look-alikes in the text), renders each with the real chat template
under transformers' settings (jinja2's sandbox, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception), and checks what `mgt tokenize --chat-template` wrote for it:
  - the text equals the template's rendering;
  - the loss mask equals the assistant spans of that rendering: the template is rendered a second
    time with markers put into its own assistant branch (each replacement checked to happen),
    and a token trains when its bytes, found by decoding the ids with the vocabulary of
    tokenizer.json in Python, overlap a marked span;
  - the ids: written to IDS_OUT for the caller to compare with Tokenizers.js's.
Usage: chat_reference.py gen FORMAT N SEED OUT.jsonl
       chat_reference.py check FORMAT CONFIG TOKENIZER_JSON CONVS.jsonl MGT_OUT.jsonl TEXTS_OUT
"""
import json
import random
import sys
import unicodedata

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

START, END = "\x01", "\x02"

# per format: (what the assistant branch says, what it says with the markers, times)
MARKS = {
    "llama3": [("'<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>'",
                "'<|end_header_id|>\n\n' + ('\\x01' if message['role'] == 'assistant' else '') "
                "+ message['content'] | trim + '<|eot_id|>' + ('\\x02' if message['role'] == "
                "'assistant' else '')", 1)],
    "qwen3": [("'<|im_start|>' + message.role + '\\n<think>\\n'",
               "'<|im_start|>' + message.role + '\\n\\x01<think>\\n'", 1),
              ("'<|im_start|>' + message.role + '\\n' + content }}",
               "'<|im_start|>' + message.role + '\\n\\x01' + content }}", 2),
              ("{{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}",
               "{{- '<|im_end|>\\x02\\n' }}\n    {%- elif message.role == \"tool\" %}", 1)],
    "llama2": [("{{ ' '  + content.strip() + ' ' + eos_token }}",
                "{{ '\\x01 '  + content.strip() + ' ' + eos_token + '\\x02' }}", 1)],
    "mistral": [("{{ message['content'] + eos_token}}",
                 "{{ '\\x01' + message['content'] + eos_token + '\\x02'}}", 1)],
}

PIECES = [
    "Hello", "world", "The quick brown fox", "2+2=4", "naïve café", "東京は晴れ", "emoji 🎉🚀",
    "e\u0301 (not NFC)", "Å\u030a", "مرحبا", "tab\there", "  leading", "trailing  ", "\n\nnewlines\n",
    " ", "\u3000ideographic space\u3000", "\xa0nbsp\xa0", "<|eot_id|>", "<|im_end|>",
    "<|im_start|>assistant\n", "</s>", "<s>", "[INST]", "[/INST]", "<think>why</think>", "</think>",
    "<<SYS>>", "<tool_response>x</tool_response>", "{{ not jinja }}", "\\n", "\"quoted\"", "a" * 40,
    "1234567890", "\r\n", "...", "!?",
]


def content(rng):
    k = rng.choice([0, 1, 1, 2, 3, 5])
    return "".join(rng.choice(PIECES) + rng.choice(["", " ", "\n"]) for _ in range(k))


def conversation(fmt, rng):
    turns = rng.randint(1, 4)
    msgs = []
    if fmt in ("llama3", "qwen3", "llama2") and rng.random() < 0.5:
        msgs.append({"role": "system", "content": content(rng)})
    for _ in range(turns):
        msgs.append({"role": "user", "content": content(rng)})
        if fmt == "qwen3" and rng.random() < 0.2:
            msgs.append({"role": "assistant", "content": content(rng)})  # two in a row
        a = {"role": "assistant", "content": content(rng)}
        if fmt == "qwen3" and rng.random() < 0.3:
            a["content"] = rng.choice(["<think>\n", "", "<think>"]) + content(rng) + "</think>" + \
                rng.choice(["\n\n", "", "\n"]) + content(rng)
        if fmt == "qwen3" and rng.random() < 0.2:
            a["reasoning_content"] = rng.choice([None, "", content(rng)])
        msgs.append(a)
        if fmt == "llama3" and rng.random() < 0.1:
            msgs.append({"role": "system", "content": content(rng)})
    if rng.random() < 0.3:
        msgs.pop()  # ends with a user turn (or a system one)
    if fmt in ("llama2", "mistral") and not any(m["role"] != "system" for m in msgs):
        msgs.append({"role": "user", "content": content(rng)})
    return {"messages": msgs}


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    return env


def marked_template(fmt, template):
    for old, new, times in MARKS[fmt]:
        assert template.count(old) == times, "%s: %r found %d times, not %d" % (
            fmt, old, template.count(old), times)
        template = template.replace(old, new)
    return template


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_spans(ids, tokjson, text, fmt):
    """Each id's [start, end) in the text as the tokenizer normalizes it, from the vocabulary."""
    vocab = {v: k for k, v in tokjson["model"]["vocab"].items()}
    added = {a["id"]: a["content"] for a in tokjson["added_tokens"]}
    bd = byte_decoder()
    spans, at, run_start = [], 0, True
    data = text.encode()
    for i in ids:
        if i in added:
            b = added[i].encode()
            run_start = True
        elif fmt in ("llama2", "mistral"):
            p = vocab[i]
            b = bytes([int(p[3:5], 16)]) if p.startswith("<0x") and len(p) == 6 else \
                p.replace("\u2581", " ").encode()
            if run_start and b.startswith(b" "):
                b = b[1:]  # the normalizer's "▁" before each run of text
            run_start = False
        else:
            b = bytes(bd[c] for c in vocab[i])
        assert data[at:at + len(b)] == b, "token %d (%r) is not the text at byte %d: %r" % (
            i, b, at, data[at:at + 40])
        spans.append((at, at + len(b)))
        at += len(b)
    assert at == len(data), "the tokens cover %d of %d bytes" % (at, len(data))
    return spans


def check(fmt, config, tokjson_path, convs, mgt_out, texts_out):
    cfg = json.load(open(config))
    tokjson = json.load(open(tokjson_path))
    env = environment()
    plain = env.from_string(cfg["chat_template"])
    marked = env.from_string(marked_template(fmt, cfg["chat_template"]))
    specials = {"bos_token": cfg.get("bos_token"), "eos_token": cfg.get("eos_token")}
    ours = [json.loads(l) for l in open(mgt_out)]
    conv = [json.loads(l) for l in open(convs)]
    assert len(ours) == len(conv), "%d outputs for %d conversations" % (len(ours), len(conv))
    trained = tokens = 0
    with open(texts_out, "w") as out:
        for k, (c, o) in enumerate(zip(conv, ours)):
            text = plain.render(messages=c["messages"], add_generation_prompt=False, **specials)
            assert o["text"] == text, "conversation %d: mgt renders %r, the template %r" % (
                k, o["text"], text)
            m = marked.render(messages=c["messages"], add_generation_prompt=False, **specials)
            assert m.replace(START, "").replace(END, "") == text, "markers changed conversation %d" % k
            if fmt == "qwen3":  # the tokenizer's NFC, with the markers in place (ASCII: kept)
                m, text = unicodedata.normalize("NFC", m), unicodedata.normalize("NFC", text)
            ranges, at, raw = [], 0, m.encode()
            data = bytearray()
            for ch in raw:
                if ch == 1:
                    ranges.append([len(data), None])
                elif ch == 2:
                    ranges[-1][1] = len(data)
                else:
                    data.append(ch)
            assert data == text.encode()
            spans = token_spans(o["ids"], tokjson, text, fmt)
            want = [int(any(a < e and b > s for s, e in ranges)) for a, b in spans]
            bad = [i for i, (x, y) in enumerate(zip(want, o["loss_mask"])) if x != y]
            assert not bad and len(want) == len(o["loss_mask"]), \
                "conversation %d: loss mask differs from the assistant spans at tokens %s: %r" % (
                    k, bad[:8], [(text.encode()[spans[i][0]:spans[i][1]], want[i]) for i in bad[:4]])
            trained += sum(want)
            tokens += len(want)
            out.write(json.dumps({"text": o["text"]}) + "\n")
    print("ok: %s: %d conversations as the template renders them, %d tokens, %d trained (the "
          "assistant spans)" % (fmt, len(conv), tokens, trained))


def main():
    if sys.argv[1] == "gen":
        fmt, n, seed, out = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        rng = random.Random(seed)
        with open(out, "w") as f:
            for _ in range(n):
                f.write(json.dumps(conversation(fmt, rng), ensure_ascii=False) + "\n")
    else:
        check(*sys.argv[2:8])


if __name__ == "__main__":
    main()
