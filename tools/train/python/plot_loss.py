"""The loss curve: training loss (trunk and MTP, smoothed) and validation loss per step, as a PNG.

    python3 tools/train/python/plot_loss.py <train-log.jsonl> <out.png>
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
steps = [r["step"] for r in rows]


def smooth(values, k=20):
    out = []
    for i in range(len(values)):
        window = values[max(0, i - k + 1) : i + 1]
        out.append(sum(window) / len(window))
    return out


fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
ax.plot(steps, [r["loss"] for r in rows], color="#9ecae1", linewidth=0.8, label="train (trunk, per step)")
ax.plot(steps, smooth([r["loss"] for r in rows]), color="#08519c", linewidth=1.8, label="train (trunk, 20-step mean)")
ax.plot(steps, smooth([r["mtpLoss"] for r in rows]), color="#e6550d", linewidth=1.4, label="train (MTP next-next token, 20-step mean)")
val = [r for r in rows if "valLoss" in r]
ax.plot([r["step"] for r in val], [r["valLoss"] for r in val], "o-", color="#31a354", label="validation (trunk)")
ax.plot([r["step"] for r in val], [r["valMtpLoss"] for r in val], "s--", color="#a63603", label="validation (MTP)")
ax.set_xlabel("step (batch 8 x 128 tokens)")
ax.set_ylabel("cross-entropy (nats / token)")
last = val[-1] if val else None
title = "keepquant default model: loss"
if last:
    title += f"  (final validation {last['valLoss']:.3f} nats, perplexity {last['valPerplexity']:.1f})"
ax.set_title(title, fontsize=10)
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2])
print(f"wrote {sys.argv[2]}")
