#!/usr/bin/env python3
"""mgt serve from Python's urllib, as a client would use it (tests/serve.sh starts the server).
Usage: serve_client.py check PORT HF_DIR GREEDY_FILE PROMPT
       serve_client.py inflight PORT OUT_FILE     (a long request; its answer into OUT_FILE)
       serve_client.py leave PORT                 (opens a stream, then leaves after its first line)
check:
  - /v1/completions at temperature 0 continues PROMPT as mgt generate --greedy did (GREEDY_FILE);
  - the prompt's log-probabilities (echo, max_tokens 0) equal those of an independent float64
    numpy forward of the exported model (tests/gpt2_numpy.py) within 1e-4;
  - 12 concurrent greedy requests of different prompts: every token of each answer is the most
    likely one, and each answer's log-probabilities equal a rescoring of its own text alone
    (a batch that mixed sequences' caches fails both);
  - the stream of a request is the same text as its answer, in events, then [DONE];
  - stop strings cut the text, n gives n choices, seeded draws repeat;
  - bad requests get 4xx and one line, and the server answers afterwards."""
import json
import os
import socket
import sys
import threading
import urllib.error
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_numpy  # noqa: E402

BASE = None


def call(method, path, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(BASE + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def complete(**kw):
    status, text = call("POST", "/v1/completions", kw)
    assert status == 200, (status, text)
    return json.loads(text)


def check(port, hf, greedy_file, prompt):
    want = open(greedy_file, encoding="utf-8").read()
    assert want.startswith(prompt) and want.endswith("\n"), want
    want = want[len(prompt):-1]
    n_new = len(want.encode())  # bytes: one token each
    r = complete(prompt=prompt, max_tokens=n_new, temperature=0)
    got = r["choices"][0]["text"]
    assert got == want, ("greedy", got, want)
    assert r["usage"] == {"prompt_tokens": len(prompt.encode()), "completion_tokens": n_new,
                          "total_tokens": len(prompt.encode()) + n_new}, r["usage"]
    print("ok: greedy /v1/completions equals mgt generate --greedy (%d tokens)" % n_new)

    # log-probabilities of a prompt against float64 numpy
    text = "This License applies to any program or other work which contains a notice"
    r = complete(prompt=text, max_tokens=0, echo=True, logprobs=1)
    lp = r["choices"][0]["logprobs"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert "".join(lp["tokens"]) == text and r["choices"][0]["text"] == text
    cfg, w = gpt2_numpy.load(hf)
    ids = list(text.encode())
    logits = gpt2_numpy.forward(cfg, w, np.array(ids))
    ref = logits - logits.max(-1, keepdims=True)
    ref = ref - np.log(np.exp(ref).sum(-1, keepdims=True))
    gap = max(abs(lp["token_logprobs"][i] - ref[i - 1][ids[i]]) for i in range(1, len(ids)))
    assert gap < 1e-4, gap
    print("ok: prompt log-probabilities equal the float64 numpy forward within %.1e" % gap)

    # concurrent greedy requests: each answer its own
    prompts = ["The %s" % w for w in ("Program", "License", "work", "copyright", "source", "terms",
                                       "Licensor", "You", "patent", "code", "notice", "GNU")]
    answers = [None] * len(prompts)

    def one(i):
        answers[i] = complete(prompt=prompts[i], max_tokens=30, temperature=0, logprobs=1)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    worst = 0.0
    for p, a in zip(prompts, answers):
        c = a["choices"][0]
        lp = c["logprobs"]
        for tok, l, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            best = max(top.values())
            assert l >= best - 1e-4, ("not the most likely token", p, tok, l, top)
        alone = complete(prompt=p + c["text"], max_tokens=0, echo=True, logprobs=0)
        mine = alone["choices"][0]["logprobs"]["token_logprobs"][len(p.encode()):]
        assert len(mine) == len(lp["token_logprobs"]), (len(mine), len(lp["token_logprobs"]))
        worst = max([worst] + [abs(a - b) for a, b in zip(mine, lp["token_logprobs"])])
    assert worst < 1e-4, worst
    print("ok: %d concurrent requests: every token the most likely, log-probabilities within "
          "%.1e of each answer rescored alone" % (len(prompts), worst))

    # the stream: the same text, in events
    req = urllib.request.Request(BASE + "/v1/completions", method="POST",
                                 data=json.dumps({"prompt": prompt, "max_tokens": n_new,
                                                  "temperature": 0, "stream": True}).encode())
    events, done = [], False
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream", resp.headers["Content-Type"]
        for line in resp:
            line = line.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            events.append(json.loads(line[6:]))
    # an event holds what was decoded since the connection's thread last looked: on a loaded
    # machine one event may carry the whole answer, so only the text and the order are checked
    assert done and len(events) >= 1, (done, len(events))
    assert "".join(e["choices"][0]["text"] for e in events) == want
    assert events[-1]["choices"][0]["finish_reason"] == "length"
    assert all(e["choices"][0]["finish_reason"] is None for e in events[:-1])
    print("ok: the stream is the answer's text in %d events, then [DONE]" % len(events))

    # a stream's log-probabilities: each event's those of its own text (a tail held back for a
    # stop string "e#" holds back its tokens too), their offsets as the unstreamed answer's
    ask = {"prompt": prompt, "max_tokens": 60, "seed": 3, "temperature": 1.0, "logprobs": 1,
           "stop": ["e#"]}
    whole = complete(**ask)["choices"][0]
    req = urllib.request.Request(BASE + "/v1/completions", method="POST",
                                 data=json.dumps(dict(ask, stream=True)).encode())
    events = []
    with urllib.request.urlopen(req, timeout=120) as resp:
        events = [json.loads(l.decode()[6:]) for l in resp if l.startswith(b"data: {")]
    joined = {"tokens": [], "token_logprobs": [], "text_offset": []}
    for e in events:
        c = e["choices"][0]
        got = c["logprobs"] or {"tokens": [], "token_logprobs": [], "text_offset": []}
        assert "".join(got["tokens"]) == c["text"], c
        for k in joined:
            joined[k] += got[k]
    assert "".join(e["choices"][0]["text"] for e in events) == whole["text"]
    for k in joined:
        assert joined[k] == whole["logprobs"][k], (k, joined[k], whole["logprobs"][k])
    assert whole["logprobs"]["text_offset"][0] == len(prompt.encode()), whole["logprobs"]
    print("ok: a stream's %d events carry the log-probabilities of their own text, offsets as "
          "the answer's" % len(events))

    # stream_options.include_usage: one last event without choices, with the answer's usage
    ask = {"prompt": prompt, "max_tokens": 12, "temperature": 0, "n": 2}
    req = urllib.request.Request(BASE + "/v1/completions", method="POST", data=json.dumps(
        dict(ask, stream=True, stream_options={"include_usage": True})).encode())
    with urllib.request.urlopen(req, timeout=120) as resp:
        events = [json.loads(l.decode()[6:]) for l in resp if l.startswith(b"data: {")]
    assert events[-1]["choices"] == [] and all(e["choices"] for e in events[:-1]), events[-1]
    assert events[-1]["usage"] == complete(**ask)["usage"], (events[-1], ask)
    status, text = call("POST", "/v1/completions", dict(ask, stream_options={"include_usage": True}))
    assert status == 400 and "only allowed with stream" in text, (status, text)
    print("ok: stream_options.include_usage: a last event with the usage %s" % events[-1]["usage"])

    # stop strings, n, seeds, the Megatron API's answer
    stop = want[5:8]
    r = complete(prompt=prompt, max_tokens=n_new, temperature=0, stop=["\u00e9", stop])
    assert r["choices"][0]["text"] == want[:want.find(stop)], (r, stop)
    assert r["choices"][0]["finish_reason"] == "stop", r
    r = complete(prompt=["a", "b"], max_tokens=5, n=3, temperature=1.0, seed=5)
    assert [c["index"] for c in r["choices"]] == list(range(6)), r
    again = complete(prompt=["a", "b"], max_tokens=5, n=3, temperature=1.0, seed=5)
    assert [c["text"] for c in r["choices"]] == [c["text"] for c in again["choices"]]
    status, text = call("PUT", "/api", {"prompts": [prompt], "tokens_to_generate": 4, "top_k": 1,
                                        "logprobs": True})
    a = json.loads(text)
    assert status == 200 and a["text"][0] == prompt + want[:4], a
    assert len(a["logprobs"][0]) == len(a["tokens"][0]) - 1 == len(prompt.encode()) + 3, a
    assert "".join(a["segments"][0]) == a["text"][0]
    status, text = call("GET", "/v1/models")
    assert status == 200 and json.loads(text)["data"][0]["object"] == "model", text
    print("ok: stop strings, n choices, repeatable seeds, PUT /api's answer, /v1/models")

    # requests without a seed, at once: each its own draws and id (all four drew the same text
    # when the default seed was the time in seconds)
    got = [None] * 8
    def unseeded(i):
        if i < 4:
            got[i] = complete(prompt=prompt, max_tokens=24, temperature=1.0)
        else:
            got[i] = json.loads(call("PUT", "/api", {"prompts": [prompt], "tokens_to_generate": 24,
                                                      "temperature": 1.0})[1])
    threads = [threading.Thread(target=unseeded, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    texts = [g["choices"][0]["text"] for g in got[:4]]
    apis = [g["text"][0] for g in got[4:]]
    assert len(set(texts)) == 4 and len(set(apis)) == 4, (texts, apis)
    assert len({g["id"] for g in got[:4]}) == 4, [g["id"] for g in got[:4]]
    print("ok: 4 concurrent unseeded completions and 4 PUT /api draw 8 different texts, 4 ids")

    name = json.loads(text)["data"][0]["id"]
    status, text = call("HEAD", "/health")
    assert status == 200 and text == "", (status, text)

    # bad requests: 4xx with one line, and the server still answers ("\u0000" inside a name or
    # a value does not end it: not the server's model, not a known field)
    named = json.dumps({"prompt": "a", "model": name + "\u0000junk"}).encode()
    bad = [("POST", "/v1/completions", named, 404, "does not exist"),
           ("POST", "/v1/completions", b'{"prompt": "a", "stream\\u0000x": true}', 400,
            "unknown field"),
           ("PUT", "/api", b"{not json", 400, "malformed JSON"),
           ("PUT", "/api", b'{"prompts": "x"}', 400, "prompts is not a list of strings"),
           ("PUT", "/api", b'{"prompts": [1]}', 400, "prompts is not a list of strings"),
           ("PUT", "/api", b'{"tokens_to_generate": 3}', 400, "prompts argument required"),
           ("PUT", "/api", b'{"prompts": ["a"], "top_k": 1.5}', 400, "top_k must be an integer"),
           ("PUT", "/api", b'{"prompts": ["a"], "tokens_to_generate": 0}', 400,
            "tokens_to_generate=0 implies logprobs"),
           ("PUT", "/api", b'{"prompts": ["a"], "temperature": 0}', 400, "temperature must be"),
           ("PUT", "/api", b'{"prompts": ["a"], "tokens_to_generate": 99999}', 400, "positions"),
           ("PUT", "/api", b'{"prompts": ["a"], "top_p": 1}', 400, "top_p must be a positive float"),
           ("PUT", "/api", json.dumps({"prompts": ["x" * 5000]}).encode(), 400, "positions"),
           ("PUT", "/api", b'[1, 2]', 400, "not a JSON object"),
           ("POST", "/api", b"{}", 405, "use PUT"),
           ("POST", "/v1/completions", b'{"prompt": "a", "max_tokens": -1}', 400, "max_tokens"),
           ("POST", "/v1/completions", b'{"prompt": "a", "logprobs": 9}', 400, "logprobs"),
           ("POST", "/v1/completions", b'{"prompt": "a", "stop": [1]}', 400, "stop"),
           ("POST", "/v1/completions", b'{"prompt": "a", "n": 100000}', 400, "n must be"),
           ("POST", "/v1/completions", b'{"prompt": [9999]}', 400, "not an id"),
           ("POST", "/v1/completions", b'{"prompt": "a", "model": "gpt-4"}', 404, "does not exist"),
           ("POST", "/v1/completions", b'{"prompt": "a", "presence_penalty": 1}', 400,
            "not supported"),
           ("GET", "/v2/anything", None, 404, "no such endpoint"),
           ("PUT", "/api", b"x" * (2 << 20), 413, "request body is over")]
    for method, path, raw, code, words in bad:
        status, text = call(method, path, raw=raw if raw is not None else None)
        assert status == code and words in text and text.count("\n") == 1, (path, raw[:40] if raw
                                                                             else raw, status, text)
        assert call("GET", "/health")[0] == 200
    print("ok: %d bad requests answered 4xx with one line each; the server still up" % len(bad))


def inflight(port, out):
    """A request that takes seconds: a long prompt scored token by token."""
    status, text = call("POST", "/v1/completions", {"prompt": "x" * 600, "max_tokens": 0,
                                                    "echo": True, "logprobs": 0})
    open(out, "w").write("%d\n%s" % (status, text))


def leave(port):
    """Starts a stream that waits seconds for its first token, reads one line, and leaves."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    body = json.dumps({"prompt": "y" * 600, "max_tokens": 50, "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while b"\r\n\r\n" not in got or b"waiting" not in got:
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    s.close()
    print("ok: a client left its stream after: %r" % got.split(b"\r\n")[0].decode())


if __name__ == "__main__":
    what, port = sys.argv[1], int(sys.argv[2])
    BASE = "http://127.0.0.1:%d" % port
    if what == "check":
        check(port, sys.argv[3], sys.argv[4], sys.argv[5])
    elif what == "inflight":
        inflight(port, sys.argv[3])
    else:
        leave(port)
