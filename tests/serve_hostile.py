#!/usr/bin/env python3
"""Hostile clients of mgt serve (tests/serve_limits.sh starts the servers), over real sockets on
127.0.0.1; each case bounded in connections and time. Usage: serve_hostile.py CASE PORT [ARGS]
  stall PORT             one client's prompt takes the tokenizer seconds (8 MB of letters, one
                         BPE piece; refused 400 at the end): another client's request is answered
                         meanwhile, well before it
  idle PORT PER_CLIENT   256 connections from 127.0.0.2 that send nothing: the server keeps at
                         most PER_CLIENT of them, and answers 127.0.0.1 at once
  idle-timeout PORT T    a connection that sends nothing is closed after about T seconds
  trickle PORT T         headers, then a body, sent a byte every 0.25 s: closed after about T s
  leave PORT             a non-streamed request whose client leaves after 0.5 s: the next
                         request (--max-batch 1) is answered at once, not after the first's
                         1000 tokens
  utf8 PORT              bytes that are not UTF-8 (0xF8, stray continuations, 0xF5, 0xC0, a cut
                         sequence) echoed by a byte-level model: every answer is valid UTF-8
                         JSON, each stray byte U+FFFD
  path PORT              a request path with %0a and %1b: answered 404 (the log is checked by
                         the caller)
  fair PORT              (--max-batch 1) a request of 6 sequences, then one of a single short
                         sequence: the short one takes its turn after the first sequence, not
                         after all 6
  values PORT            a body of 300,000 tiny values (its 600 KB within the body limit)
                         answered 413 by the cap on values; a request of token ids still 200
  drain PORT OUT         a long request and a client trickling its body while the server is
                         stopped: the request's status and body into OUT"""
import http.client
import json
import socket
import sys
import threading
import time

PORT = None


def connect(src="127.0.0.1"):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(30)
    s.connect(("127.0.0.1", PORT))
    return s


def closed_by_server(s, wait):
    """Whether the server closes s within `wait` seconds (reading EOF or a reset)."""
    s.settimeout(wait)
    try:
        return s.recv(4096) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def post(path, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.read()


def stall():
    import random
    random.seed(7)
    big = "".join(random.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8 << 20))
    done = {}

    def attacker():
        t0 = time.time()
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=300)
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": big, "max_tokens": 1}))
        done["sent"] = time.time()
        r = c.getresponse()
        r.read()
        done["status"], done["end"], done["t0"] = r.status, time.time(), t0

    th = threading.Thread(target=attacker)
    th.start()
    while "sent" not in done:
        time.sleep(0.01)
    time.sleep(1.0)  # the body is in and parsed: the tokenizer is at work for seconds
    t = time.time()
    status, body = post("/v1/completions", {"prompt": "Hello there", "max_tokens": 4,
                                            "temperature": 0})
    victim_end = time.time()
    th.join()
    assert status == 200, (status, body[:200])
    assert done["status"] == 400, done
    took, attack = victim_end - t, done["end"] - done["sent"]
    assert attack > 2.5, "the 8 MB prompt took only %.1f s: not a test of the stall" % attack
    assert victim_end < done["end"] and took < 2.0, \
        "the short request took %.2f s, ending %.2f s before the 8 MB prompt's 400" % (
            took, done["end"] - victim_end)
    print("ok: a short request answered in %.3f s while an 8 MB prompt took the tokenizer %.1f s"
          % (took, attack))


def idle(per_client):
    conns = [connect("127.0.0.2") for _ in range(256)]
    time.sleep(0.5)
    t = time.time()
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=10)
    c.request("GET", "/health")
    r = c.getresponse()
    assert r.status == 200 and b"ok" in r.read(), r.status
    took = time.time() - t
    assert took < 2, "/health took %.1f s beside 256 idle connections" % took
    kept = sum(not closed_by_server(s, 0.05) for s in conns)
    assert kept <= per_client, "%d idle connections from one address kept (limit %d)" % (
        kept, per_client)
    for s in conns:
        s.close()
    print("ok: 256 idle connections from 127.0.0.2: %d kept (at most %d), /health from "
          "127.0.0.1 in %.3f s" % (kept, per_client, took))


def idle_timeout(t):
    s = connect()
    t0 = time.time()
    assert closed_by_server(s, t + 5), "an idle connection still open after %.0f s" % (t + 5)
    took = time.time() - t0
    assert took > t - 1, "closed after %.1f s, before the idle timeout of %g s" % (took, t)
    print("ok: a connection that sends nothing closed after %.1f s (--idle-timeout %g)" % (took, t))


def trickle(t):
    for what, head, body in [
            ("headers", b"GET /health HTTP/1.1\r\nHost: " + b"x" * 200 + b"\r\n\r\n", b""),
            ("body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 400\r\n\r\n",
             b" " * 400)]:
        s = connect()
        t0 = time.time()
        data = head
        if body:
            s.sendall(head)
            data = body
        cut = None
        for i in range(len(data)):
            try:
                s.send(data[i:i + 1])
            except (BrokenPipeError, ConnectionResetError):
                cut = time.time() - t0
                break
            if closed_by_server(s, 0.25):
                cut = time.time() - t0
                break
        assert cut is not None, "trickled %s never cut off" % what
        assert t - 1 < cut < t + 3, "trickled %s cut after %.1f s (--request-timeout %g)" % (
            what, cut, t)
        s.close()
        print("ok: %s trickled a byte every 0.25 s: closed after %.1f s (--request-timeout %g)" % (
            what, cut, t))


def leave():
    s = connect()
    body = json.dumps({"prompt": "a", "max_tokens": 1000, "temperature": 0}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    time.sleep(0.5)
    s.close()
    t = time.time()
    status, out = post("/v1/completions", {"prompt": "b", "max_tokens": 2}, timeout=60)
    took = time.time() - t
    assert status == 200, (status, out[:200])
    assert took < 3, "the next request took %.1f s: the one whose client left kept decoding" % took
    print("ok: a request whose client left is cancelled: the next one answered in %.2f s" % took)


def fair():
    done = {}

    def many():
        t0 = time.time()
        done["status"], _ = post("/v1/completions", {"prompt": "a", "n": 6, "max_tokens": 60,
                                                      "temperature": 0})
        done["t0"], done["end"] = t0, time.time()

    th = threading.Thread(target=many)
    th.start()
    time.sleep(0.3)
    t = time.time()
    status, out = post("/v1/completions", {"prompt": "b", "max_tokens": 2, "temperature": 0})
    end = time.time()
    th.join()
    assert status == 200 and done["status"] == 200, (status, out[:200], done)
    many_took = done["end"] - done["t0"]
    assert many_took > 1.0, "6 sequences of 60 tokens took only %.2f s: not a test" % many_took
    assert end < done["end"] - many_took / 3, (
        "the short request ended %.2f s after it began, %.2f s before the request of 6 "
        "sequences (%.2f s): it waited for most of them" % (end - t, done["end"] - end, many_took))
    print("ok: a short request answered in %.2f s beside a request of 6 sequences (%.2f s)"
          % (end - t, many_took))


def values():
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    body = '{"prompts": ["a"], "tokens_to_generate": 1, "x": [%s]}' % ",".join(["0"] * 300000)
    c.request("PUT", "/api", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.read()
    assert r.status == 413 and b"JSON values" in out, (r.status, out[:300])
    status, out = post("/v1/completions", {"prompt": [[97] * 200], "max_tokens": 1})
    assert status == 200, (status, out[:300])
    print("ok: a body of 300,000 values answered 413; a request of 200 token ids 200")


def strict(raw):
    """The body as JSON, decoded as strict UTF-8 (as Go's, Rust's and browsers' parsers)."""
    return json.loads(raw.decode("utf-8", errors="strict"))


def utf8():
    bad = [0xF8, 0x80, 0x80, 0xF5, 0xC0, 0xE2, 0x82]
    want = bytes(bad).decode("utf-8", errors="replace")  # one U+FFFD per maximal subpart: 6
    status, raw = post("/v1/completions", {"prompt": bad, "max_tokens": 0, "echo": True,
                                           "logprobs": 1})
    assert status == 200, (status, raw[:200])
    r = strict(raw)
    assert r["choices"][0]["text"] == want, ascii(r["choices"][0]["text"])
    toks = r["choices"][0]["logprobs"]["tokens"]
    assert toks == ["\ufffd"] * len(bad), ascii(toks)
    # the stream of the same
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": bad, "max_tokens": 0, "echo": True, "stream": True}))
    events = c.getresponse().read().decode("utf-8", errors="strict")
    text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events.split("\n\n")
                   if e.startswith("data: {"))
    assert text == want, ascii(text)
    # Megatron's API, its segments too; a sampled continuation of a byte-level model is any bytes
    cm = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    cm.request("PUT", "/api", body=json.dumps({"prompts": ["\u00e9t\u00e9"], "tokens_to_generate":
                                               64, "temperature": 1.0, "random_seed": 3}),
               headers={"Content-Type": "application/json"})
    rm = cm.getresponse()
    m = strict(rm.read())
    assert rm.status == 200 and m["text"][0].startswith("\u00e9t\u00e9"), m
    print("ok: 7 bytes that are not UTF-8 echoed as Python decodes them (%d U+FFFD) in the answer "
          "and its stream, one a token in its logprobs; Megatron's answer of 64 sampled bytes is "
          "valid UTF-8" % len(want))


def path():
    s = connect()
    s.sendall(b"GET /x%0aserve:%20forged%20line%1b[2J HTTP/1.1\r\nHost: x\r\nConnection: close"
              b"\r\n\r\n")
    reply = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        reply += d
    assert reply.startswith(b"HTTP/1.1 404"), reply[:100]
    strict(reply.split(b"\r\n\r\n", 1)[1])
    print("ok: a path with %0a and %1b answered 404 with valid JSON")


def drain(out):
    result = {}

    def long_request():
        try:
            result["status"], result["body"] = post(
                "/v1/completions", {"prompt": "a", "max_tokens": 1000, "temperature": 0}, 60)
        except Exception as e:  # noqa: BLE001
            result["status"], result["body"] = 0, repr(e).encode()

    th = threading.Thread(target=long_request)
    th.start()
    s = connect()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 400\r\n\r\n")
    open(out + ".ready", "w").close()  # the caller sends SIGTERM now
    for _ in range(120):  # a byte every 0.25 s, for 30 s at most
        try:
            s.send(b" ")
        except (BrokenPipeError, ConnectionResetError):
            break
        time.sleep(0.25)
    th.join()
    with open(out, "w") as f:
        f.write("%d\n%s" % (result["status"], result["body"].decode("utf-8", "replace")))


def main():
    global PORT
    case, PORT = sys.argv[1], int(sys.argv[2])
    args = sys.argv[3:]
    {"stall": stall, "idle": lambda: idle(int(args[0])),
     "idle-timeout": lambda: idle_timeout(float(args[0])),
     "trickle": lambda: trickle(float(args[0])), "leave": leave, "utf8": utf8, "path": path,
     "fair": fair, "values": values, "drain": lambda: drain(args[0])}[case]()


main()
