"""MTP (NextN) draft acceptance for k = 1, greedy, measured in PyTorch (the engine has no MTP forward yet).

    python3 tools/train/python/mtp_acceptance.py <weights.kqtw> <prompts.json> <out.json>

weights.kqtw holds GGUF-named f32 tensors: the trained weights, or a quantized GGUF dequantized by
src/dequantize-gguf.ts (the shipped Q4_K_M as the engine sees it). prompts.json: {"prompts": [[ids]],
"nTokens": 64}. For each prompt the trunk decodes nTokens greedily (ties -> lowest id); then at every
generated position p the MTP block drafts x_{p+1} from (x_p, h_{p-1}) (its own attention over all
earlier rows, as llama.cpp's MTP context keeps them); a draft is accepted when it equals the trunk's
greedy token. Acceptance = accepted / drafted over all prompts.
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen35 import Config, Qwen35, load_gguf_tensors  # noqa: E402
from tensor_file import read_tensor_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
torch.set_num_threads(1)
recipe = json.load(open(os.path.join(HERE, "..", "recipe.json")))
tensors, _ = read_tensor_file(sys.argv[1])
job = json.load(open(sys.argv[2]))
vocab = tensors["token_embd.weight"].shape[0]
model = Qwen35(Config({**recipe["model"], "vocab": vocab}))
load_gguf_tensors(model, tensors)
model.eval()

accepted = drafted = 0
per_prompt = []
with torch.no_grad():
    for prompt in job["prompts"]:
        ids = list(prompt)
        for _ in range(job["nTokens"]):
            logits = model.logits(model.trunk(torch.tensor([ids]))[:, -1])[0]
            ids.append(int(torch.argmax(logits)))  # first maximum: ties -> lowest id
        x = torch.tensor([ids])
        h = model.trunk(x)
        drafts = torch.argmax(model.logits(model.mtp_hidden(x, h))[0], dim=-1)  # row r = position r + 1 -> x[r + 2]
        hits = total = 0
        for p in range(len(prompt), len(ids) - 1):
            total += 1
            hits += int(drafts[p - 1]) == ids[p + 1]
        accepted += hits
        drafted += total
        per_prompt.append({"accepted": hits, "drafted": total, "generated": ids[len(prompt):]})
result = {"accepted": accepted, "drafted": drafted, "acceptance": accepted / drafted, "prompts": per_prompt}
json.dump(result, open(sys.argv[3], "w"), indent=1)
print(f"MTP k=1 greedy acceptance: {accepted}/{drafted} = {accepted / drafted:.3f}")
