"""Layout and formula check before training: a RANDOMLY initialised model (every norm, A_log and
dt_bias perturbed so the export transforms matter) exported as a tensor file, plus its logits on a
fixed token sequence computed with the token-by-token recurrence. The TypeScript side
(src/check-random.ts) writes the GGUF and compares the engine's and llama.cpp's logits with these.

    python3 tools/train/python/check_random.py <recipe.json> <vocab-size> <out-dir>
"""

import json
import sys

import torch

from qwen35 import Config, Qwen35, gguf_tensors
from tensor_file import write_tensor_file

torch.manual_seed(0)
recipe = json.load(open(sys.argv[1]))
vocab = int(sys.argv[2])
out_dir = sys.argv[3]
c = Config({**recipe["model"], "vocab": vocab})
model = Qwen35(c)
model.init_weights(seed=7)
gen = torch.Generator().manual_seed(11)
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("norm.weight") or name.endswith("norm"):
            p.add_(0.2 * torch.randn(p.shape, generator=gen))
        elif name.endswith("A_log") or name.endswith("dt_bias"):
            p.add_(0.5 * torch.randn(p.shape, generator=gen))
        elif name == "embed.weight":
            p.mul_(25.0)  # logits of std ~ a few nats through the tied head
        elif p.dim() == 2:
            p.mul_(3.0)

ids = torch.randint(0, vocab, (1, 40), generator=gen)
with torch.no_grad():
    h_rec = model.trunk(ids, recurrent=True)
    h_chunk = model.trunk(ids, recurrent=False)
    logits = model.logits(h_rec)[0]
    mtp = model.logits(model.mtp_hidden(ids, h_rec))[0] if c.mtp else None
print(f"chunked vs recurrent trunk: max |dh| {float((h_rec - h_chunk).abs().max()):.3e}")
print(f"logits std {float(logits.std()):.3f}")
write_tensor_file(f"{out_dir}/random.kqtw", gguf_tensors(model))
json.dump(
    {"ids": ids[0].tolist(), "logits": logits.tolist(), "mtpLogits": None if mtp is None else mtp.tolist()},
    open(f"{out_dir}/random-logits.json", "w"),
)
