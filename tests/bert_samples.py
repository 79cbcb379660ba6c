#!/usr/bin/env python3
"""Megatron-LM v2.5's BERT samples, rewritten here in its own style (Python lists, numpy's
RandomState for each sample), as the reference for io/data/bert_data.c: the samples mapping of
helpers.cpp (std::mt19937 and std::mt19937_64, written out below) and the sample builder of
bert_dataset.py / dataset_utils.py. Compares with the JSON lines of tests/test_bert_data.

Usage: bert_samples.py DATASET.h5 VOCAB.txt SEQ_LENGTH N SEED BINARY(0/1) < test_bert_data output
"""
import json
import sys

import h5py
import numpy as np

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


class MT19937:
    def __init__(self, seed):
        self.mt = [seed & M32]
        for i in range(1, 624):
            self.mt.append((1812433253 * (self.mt[-1] ^ (self.mt[-1] >> 30)) + i) & M32)
        self.i = 624

    def __call__(self):
        if self.i >= 624:
            for k in range(624):
                y = (self.mt[k] & 0x80000000) | (self.mt[(k + 1) % 624] & 0x7FFFFFFF)
                self.mt[k] = self.mt[(k + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            self.i = 0
        y = self.mt[self.i]
        self.i += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)


class MT19937_64:
    def __init__(self, seed):
        self.mt = [seed & M64]
        for i in range(1, 312):
            self.mt.append((6364136223846793005 * (self.mt[-1] ^ (self.mt[-1] >> 62)) + i) & M64)
        self.i = 312

    def __call__(self):
        if self.i >= 312:
            for k in range(312):
                y = (self.mt[k] & 0xFFFFFFFF80000000) | (self.mt[(k + 1) % 312] & 0x7FFFFFFF)
                self.mt[k] = self.mt[(k + 156) % 312] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
            self.i = 0
        x = self.mt[self.i]
        self.i += 1
        x ^= (x >> 29) & 0x5555555555555555
        x ^= (x << 17) & 0x71D67FFFEDA60000 & M64
        x ^= (x << 37) & 0xFFF7EEE000000000 & M64
        return x ^ (x >> 43)


def build_mapping(docs, sizes, max_num_samples, max_seq_length, short_seq_prob, seed, min_num_sent):
    """helpers.cpp build_mapping_impl, one pass (both of its passes draw the same)."""
    short_seq_ratio = int(round(1.0 / short_seq_prob))
    rand32 = MT19937(seed)

    def target():
        r = rand32()
        return 2 + r % (max_seq_length - 1) if r % short_seq_ratio == 0 else max_seq_length

    maps = []
    epoch = 0
    while len(maps) < max_num_samples:
        if epoch == 1 and not maps:
            break
        for doc in range(len(docs) - 1):
            first, last = docs[doc], docs[doc + 1]
            remain = last - first
            long_sentence = remain > 1 and any(sizes[s] > 512 for s in range(first, last))
            if remain >= min_num_sent and not long_sentence:
                prev, size, num_sent, seq_len = first, 0, 0, target()
                for s in range(first, last):
                    size += sizes[s]
                    num_sent += 1
                    remain -= 1
                    if (size >= seq_len and remain > 1 and num_sent >= min_num_sent) or remain == 0:
                        maps.append([prev, s + 1, seq_len])
                        prev, seq_len, size, num_sent = s + 1, target(), 0, 0
        epoch += 1
    rand64 = MT19937_64(seed + 1)
    for i in range(len(maps) - 1, 0, -1):
        j = rand64() % (i + 1)
        maps[i], maps[j] = maps[j], maps[i]
    return maps


def masked_lm(tokens, vocab_id_list, is_continuation, masked_lm_prob, cls_id, sep_id, mask_id,
              max_predictions_per_seq, np_rng, max_ngrams=3):
    """dataset_utils.py create_masked_lm_predictions: whole words, n-grams, bert style."""
    cand_indexes = []
    for (i, token) in enumerate(tokens):
        if token == cls_id or token == sep_id:
            continue
        if len(cand_indexes) >= 1 and is_continuation[token]:
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    output_tokens = list(tokens)
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    ngrams = np.arange(1, max_ngrams + 1, dtype=np.int64)
    pvals = 1. / np.arange(1, max_ngrams + 1)
    pvals /= pvals.sum(keepdims=True)
    ngram_indexes = []
    for idx in range(len(cand_indexes)):
        ngram_indexes.append([cand_indexes[idx:idx + n] for n in ngrams])
    np_rng.shuffle(ngram_indexes)
    masked_lms = []
    covered = set()
    for cand_index_set in ngram_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if not cand_index_set:
            continue
        n = np_rng.choice(ngrams[:len(cand_index_set)],
                          p=pvals[:len(cand_index_set)] / pvals[:len(cand_index_set)].sum(keepdims=True))
        index_set = sum(cand_index_set[n - 1], [])
        n -= 1
        while len(masked_lms) + len(index_set) > num_to_predict:
            if n == 0:
                break
            index_set = sum(cand_index_set[n - 1], [])
            n -= 1
        if len(masked_lms) + len(index_set) > num_to_predict:
            continue
        if any(index in covered for index in index_set):
            continue
        for index in index_set:
            covered.add(index)
            if np_rng.random() < 0.8:
                masked_token = mask_id
            elif np_rng.random() < 0.5:
                masked_token = tokens[index]
            else:
                masked_token = vocab_id_list[np_rng.randint(0, len(vocab_id_list))]
            output_tokens[index] = masked_token
            masked_lms.append((index, tokens[index]))
    return output_tokens, sorted(masked_lms)


def build_sample(sample, target_seq_length, max_seq_length, vocab_id_list, is_continuation,
                 cls_id, sep_id, mask_id, pad_id, masked_lm_prob, np_rng, binary_head):
    """bert_dataset.py build_training_sample."""
    if binary_head:
        n_sentences = len(sample)
        a_end = 1
        if n_sentences >= 3:
            a_end = np_rng.randint(1, n_sentences)
        tokens_a = sum(sample[:a_end], [])
        tokens_b = sum(sample[a_end:], [])
        is_random = False
        if np_rng.random() < 0.5:
            is_random = True
            tokens_a, tokens_b = tokens_b, tokens_a
    else:
        tokens_a, tokens_b, is_random = sum(sample, []), [], False
    len_a, len_b = len(tokens_a), len(tokens_b)
    while len_a + len_b > target_seq_length:
        if len_a > len_b:
            len_a -= 1
            t = tokens_a
        else:
            len_b -= 1
            t = tokens_b
        if np_rng.random() < 0.5:
            del t[0]
        else:
            t.pop()
    tokens = [cls_id] + tokens_a + [sep_id]
    types = [0] * len(tokens)
    if tokens_b:
        tokens += tokens_b + [sep_id]
        types += [1] * (len(tokens_b) + 1)
    max_predictions_per_seq = masked_lm_prob * target_seq_length
    tokens, masked = masked_lm(tokens, vocab_id_list, is_continuation, masked_lm_prob, cls_id,
                               sep_id, mask_id, max_predictions_per_seq, np_rng)
    n = len(tokens)
    labels = [-1] * max_seq_length
    for i, l in masked:
        labels[i] = l
    pad = [pad_id] * (max_seq_length - n)
    return tokens + pad, types + pad, labels, n, int(is_random)


class Corpus:
    """A sentence dataset (tokens, sentence and document offsets) and its WordPiece vocabulary."""

    def __init__(self, path, vocab_file):
        f = h5py.File(path, "r")
        self.tok = f["tokens"][()].astype(np.int64).tolist()
        self.so = so = f["sentence_offsets"][()].tolist()
        do = f["document_offsets"][()].tolist()
        self.sizes = [so[j + 1] - so[j] for j in range(len(so) - 1)]
        start = {o: j for j, o in enumerate(so)}
        self.docs = [start[o] for o in do]
        pieces = [l.strip() for l in open(vocab_file, encoding="utf-8").read().split("\n")]
        if pieces and pieces[-1] == "":
            pieces.pop()
        self.n_vocab = len(pieces)
        self.ids = {p: i for i, p in enumerate(pieces)}
        self.is_cont = [p.startswith("##") for p in pieces]

    def mapping(self, N, T, seed, binary):
        return build_mapping(self.docs, self.sizes, N, T - 3, 0.1, seed, 2 if binary else 1)

    def sample(self, row, idx, T, seed, binary):
        """Sample idx of mapping row `row`: tokens, types, labels, length, is_random."""
        sample = [self.tok[self.so[j]:self.so[j + 1]] for j in range(row[0], row[1])]
        rng = np.random.RandomState(seed=(seed + idx) % 2**32)
        ids = self.ids
        return build_sample(sample, row[2], T, list(range(self.n_vocab)), self.is_cont, ids["[CLS]"],
                            ids["[SEP]"], ids["[MASK]"], ids["[PAD]"], 0.15, rng, binary)


def main():
    path, vocab_file, T, N, seed, binary = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    corpus = Corpus(path, vocab_file)
    maps = corpus.mapping(N, T, seed, binary)
    got = [json.loads(l) for l in sys.stdin]
    assert got[0]["n_map"] == len(maps) and got[0]["rows"] == maps, \
        "mapping: %d rows here, %d there" % (len(maps), got[0]["n_map"])
    print("ok: the samples mapping: %d rows, identical (%d of target < %d)" %
          (len(maps), sum(r[2] < T - 3 for r in maps), T - 3))
    n_masked = 0
    for s in got[1:]:
        idx = s["idx"]
        want = corpus.sample(maps[idx], idx, T, seed, binary)
        mine = (s["tokens"], s["types"], s["labels"], s["length"], s["is_random"])
        for name, a, b in zip(("tokens", "types", "labels", "length", "is_random"), mine, want):
            assert a == b, "sample %d: %s differ:\n  C      %s\n  Python %s" % (idx, name, a, b)
        n_masked += sum(l >= 0 for l in s["labels"])
    print("ok: %d samples identical (segments, sentence-order swaps, truncation, %d masked positions)" %
          (len(got) - 1, n_masked))


if __name__ == "__main__":
    main()
