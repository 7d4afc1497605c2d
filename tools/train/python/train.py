"""Step 2 of the recipe: trains the qwen35 model on the token streams of prepare.ts (CPU, PyTorch).

    nice -n 19 python3 tools/train/python/train.py [work-dir]

Deterministic for a given recipe (seeded init and batch order, one thread). Checkpoints every
`checkpointEvery` steps (checkpoint.pt, written to a temporary name and renamed) and resumes from it,
so a killed run continues where it stopped and ends with the same weights. Logs one JSON line per step
to train-log.jsonl (step, train loss, MTP loss, learning rate, wall seconds) and validation loss /
perplexity (trunk and MTP) every `evalEvery` steps. At the end writes weights.kqtw (GGUF names and
layouts, see qwen35.gguf_tensors) and final.json (validation loss, perplexity, wall time).
"""

import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen35 import Config, Qwen35, gguf_tensors  # noqa: E402
from tensor_file import write_tensor_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RECIPE = json.load(open(os.path.join(HERE, "..", "recipe.json")))
WORK = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KEEPQUANT_TRAIN_DIR", os.path.join(HERE, "..", ".work"))
T = RECIPE["training"]
DATASET = json.load(open(os.path.join(WORK, "dataset.json")))

torch.set_num_threads(int(T["threads"]))
torch.manual_seed(RECIPE["seed"])

config = Config({**RECIPE["model"], "vocab": DATASET["vocabSize"]})
train_ids = torch.from_numpy(np.fromfile(os.path.join(WORK, "train.bin"), dtype="<u2").astype(np.int64))
val_ids = torch.from_numpy(np.fromfile(os.path.join(WORK, "val.bin"), dtype="<u2").astype(np.int64))
SEQ, BATCH, STEPS = int(T["sequenceLength"]), int(T["batchSize"]), int(T["steps"])


def batch_at(stream, step, salt, batch=BATCH):
    """Windows of SEQ + 1 tokens at offsets drawn from a generator seeded by (seed, step, salt)."""
    gen = torch.Generator().manual_seed(RECIPE["seed"] * 1_000_003 + step * 7 + salt)
    starts = torch.randint(0, len(stream) - SEQ - 1, (batch,), generator=gen)
    return torch.stack([stream[s : s + SEQ + 1] for s in starts.tolist()])


def losses(model, window):
    """Trunk next-token loss and MTP next-next-token loss (mean cross-entropy, nats)."""
    ids, targets = window[:, :-1], window[:, 1:]
    h = model.trunk(ids)
    trunk = F.cross_entropy(model.logits(h).reshape(-1, config.vocab), targets.reshape(-1))
    # MTP row p (x_p with h_{p-1}, p = 1..SEQ-1) predicts x_{p+1} = window[:, p + 1]
    mtp_logits = model.logits(model.mtp_hidden(ids, h))
    mtp = F.cross_entropy(mtp_logits.reshape(-1, config.vocab), window[:, 2:].reshape(-1))
    return trunk, mtp


# The cosine runs over `cosineSteps` (default: `steps`). With `decayFrom`, the learning rate follows the
# cosine up to that step, then falls linearly to the floor at `steps` (a run cut short on a loaded machine
# keeps its first `decayFrom` steps bit for bit).
COSINE_STEPS = int(T.get("cosineSteps", STEPS))
DECAY_FROM = int(T["decayFrom"]) if "decayFrom" in T else None
if DECAY_FROM is not None and not (T["warmupSteps"] <= DECAY_FROM < STEPS <= COSINE_STEPS):
    sys.exit(f"recipe.json training: need warmupSteps <= decayFrom < steps <= cosineSteps, got {DECAY_FROM}, {STEPS}, {COSINE_STEPS}")


def cosine_rate(step):
    peak, warm = T["learningRate"], T["warmupSteps"]
    if step < warm:
        return peak * (step + 1) / warm
    progress = (step - warm) / max(1, COSINE_STEPS - warm)
    floor = peak * T["minLearningRateFraction"]
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def learning_rate(step):
    if DECAY_FROM is None or step < DECAY_FROM:
        return cosine_rate(step)
    floor = T["learningRate"] * T["minLearningRateFraction"]
    start = cosine_rate(DECAY_FROM)
    return start + (floor - start) * (step - DECAY_FROM) / max(1, STEPS - 1 - DECAY_FROM)


def evaluate(model):
    model.eval()
    trunk_sum = mtp_sum = 0.0
    n = int(T["evalBatches"])
    with torch.no_grad():
        for i in range(n):
            trunk, mtp = losses(model, batch_at(val_ids, i, salt=999_983, batch=8))
            trunk_sum += float(trunk)
            mtp_sum += float(mtp)
    model.train()
    return trunk_sum / n, mtp_sum / n


def main():
    model = Qwen35(config)
    model.init_weights(RECIPE["seed"])
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": T["weightDecay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=T["learningRate"],
        betas=(0.9, 0.95),
    )
    checkpoint = os.path.join(WORK, "checkpoint.pt")
    log_path = os.path.join(WORK, "train-log.jsonl")
    step, wall = 0, 0.0
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, wall = state["step"], state["wall"]
        print(f"resumed at step {step} ({wall:.0f} s of training so far)", flush=True)
    elif os.path.exists(log_path):
        os.remove(log_path)
    print(f"parameters {sum(p.numel() for p in model.parameters())}, train tokens {len(train_ids)}", flush=True)
    log = open(log_path, "a")

    def save():
        tmp = f"{checkpoint}.tmp-{os.getpid()}"
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "wall": wall}, tmp)
        os.replace(tmp, checkpoint)

    while step < STEPS:
        started = time.time()
        for group in opt.param_groups:
            group["lr"] = learning_rate(step)
        trunk, mtp = losses(model, batch_at(train_ids, step, salt=0))
        loss = trunk + T["mtpLossWeight"] * mtp
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), T["gradientClip"])
        opt.step()
        step += 1
        wall += time.time() - started
        entry = {"step": step, "loss": float(trunk), "mtpLoss": float(mtp), "lr": learning_rate(step - 1), "wall": round(wall, 2)}
        if step % int(T["evalEvery"]) == 0 or step == STEPS:
            val, val_mtp = evaluate(model)
            entry.update({"valLoss": val, "valPerplexity": math.exp(val), "valMtpLoss": val_mtp})
        log.write(json.dumps(entry) + "\n")
        log.flush()
        if step % 10 == 0 or "valLoss" in entry:
            print(json.dumps(entry), flush=True)
        if step % int(T["checkpointEvery"]) == 0 or step == STEPS:
            save()

    val, val_mtp = evaluate(model)
    final = {
        "steps": step,
        "trainTokens": step * BATCH * SEQ,
        "wallSeconds": round(wall, 1),
        "valLoss": val,
        "valPerplexity": math.exp(val),
        "valMtpLoss": val_mtp,
        "valMtpPerplexity": math.exp(val_mtp),
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
    }
    write_tensor_file(os.path.join(WORK, "weights.kqtw"), gguf_tensors(model), meta=final)
    json.dump(final, open(os.path.join(WORK, "final.json"), "w"), indent=2)
    print(json.dumps(final), flush=True)


if __name__ == "__main__":
    main()
