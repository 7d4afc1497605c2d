"""Writes weights.kqtw (GGUF names and layouts) from the training checkpoint, e.g. to try the export
and evaluation steps on an unfinished run. train.py writes the same file at the end.

    python3 tools/train/python/checkpoint_weights.py [work-dir] [out-file]
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen35 import Config, Qwen35, gguf_tensors  # noqa: E402
from tensor_file import write_tensor_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
work = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", ".work")
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(work, "weights.kqtw")
recipe = json.load(open(os.path.join(HERE, "..", "recipe.json")))
dataset = json.load(open(os.path.join(work, "dataset.json")))
model = Qwen35(Config({**recipe["model"], "vocab": dataset["vocabSize"]}))
state = torch.load(os.path.join(work, "checkpoint.pt"))
model.load_state_dict(state["model"])
write_tensor_file(out, gguf_tensors(model), meta={"step": state["step"], "wallSeconds": state["wall"]})
print(f"wrote {out} from step {state['step']}")
