"""A Hugging Face GPT-2 directory of L tiny layers (hidden 4, 12 tensors a layer, float32,
weights 0, 1, 2, ... in file order): many tensors and few bytes, for the import's per-tensor
work. Usage: hf_tiny_gpt2.py OUT_DIR LAYERS"""
import json, os, struct, sys

import numpy as np

out, L, C = sys.argv[1], int(sys.argv[2]), 4
os.makedirs(out)
layer = [("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (C, 3 * C)),
         ("attn.c_attn.bias", (3 * C,)), ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
         ("ln_2.weight", (C,)), ("ln_2.bias", (C,)), ("mlp.c_fc.weight", (C, 4 * C)),
         ("mlp.c_fc.bias", (4 * C,)), ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))]
names = [("transformer.wte.weight", (8, C)), ("transformer.wpe.weight", (4, C))]
names += [("transformer.h.%d.%s" % (l, n), s) for l in range(L) for n, s in layer]
names += [("transformer.ln_f.weight", (C,)), ("transformer.ln_f.bias", (C,))]
header, off = {}, 0
for n, s in names:
    k = int(np.prod(s)) * 4
    header[n] = {"dtype": "F32", "shape": list(s), "data_offsets": [off, off + k]}
    off += k
t = json.dumps(header).encode()
with open(out + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(t)) + t + np.arange(off // 4, dtype=np.float32).tobytes())
config = {"model_type": "gpt2", "n_embd": C, "n_layer": L, "n_head": 1, "n_positions": 4, "vocab_size": 8}
json.dump(config, open(out + "/config.json", "w"))
