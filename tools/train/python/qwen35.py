"""A small qwen35 (Qwen3.5 dense hybrid) in PyTorch: the function llama.cpp and @keepquant/engine compute.

Every formula follows docs/qwen35.md (the forward as llama.cpp computes it):
- zero-centred RMSNorms x * rsqrt(mean(x^2) + eps) * (1 + w), exported as the stored (1 + w);
  the GDN gated norm uses its raw weight;
- Gated DeltaNet layers: qkv projection, causal depthwise conv (kernel K, no bias) + SiLU, L2 norm
  x / sqrt(sum(x^2) + eps) of q and k, beta = sigmoid, g = softplus(alpha + dt_bias) * ssm_a with
  ssm_a = -exp(A_log), the gated delta rule (decay, then delta, readout of the updated state, q scaled
  by 1/sqrt(Dv)), gated RMSNorm (norm, then * silu(z)), output projection;
- V heads in the GGUF's tiled order: V head h uses Q/K head h mod Hk (no reorder at export);
- gated full attention: per-head [q | gate] rows, per-head Q/K RMSNorm, NEOX RoPE on the first
  n_rot dims (IMROPE with text positions is exactly NEOX), causal GQA softmax attention with scale
  1/sqrt(Dh), output * sigmoid(gate);
- SwiGLU FFN, pre-norm residuals, output norm, tied head;
- one MTP/NextN block: u = eh_proj([rms(emb(x_p)) * enorm, rms(h_{p-1}) * hnorm]), one full-attention
  decoder block, shared_head_norm, the shared head; trained to predict x_{p+1} (next-next token).

The training path runs the delta rule in its chunked (WY) form; `recurrent=True` runs the token-by-token
recurrence llama.cpp runs. Both compute the same function (tested by check_random.py).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, d):
        self.vocab = d["vocab"]
        self.hidden = d["hidden"]
        self.layers = d["layers"]
        self.ffn = d["ffn"]
        self.heads = d["heads"]
        self.heads_kv = d["headsKv"]
        self.head_dim = d["headDim"]
        self.ssm_groups = d["ssmGroups"]
        self.ssm_heads = d["ssmHeads"]
        self.ssm_state = d["ssmStateSize"]
        self.conv_kernel = d["convKernel"]
        self.rope_dims = d["ropeDims"]
        self.rope_theta = d["ropeTheta"]
        self.eps = d["eps"]
        self.interval = d.get("fullAttentionInterval", 4)
        self.mtp = bool(d.get("mtp", False))
        self.tied = bool(d.get("tied", True))
        assert self.ssm_heads % self.ssm_groups == 0
        assert self.heads % self.heads_kv == 0

    def is_recurrent(self, il):
        return (il + 1) % self.interval != 0

    @property
    def key_dim(self):
        return self.ssm_groups * self.ssm_state

    @property
    def value_dim(self):
        return self.ssm_heads * self.ssm_state

    @property
    def conv_dim(self):
        return 2 * self.key_dim + self.value_dim


def rms_norm(x, weight, eps, plus_one=True):
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * (1.0 + weight) if plus_one else x * weight


def l2_norm(x, eps):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


class ZeroCentredNorm(nn.Module):
    """RMSNorm computing x_hat * (1 + w); exported as 1 + w."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def rope_neox(x, positions, n_rot, theta):
    """NEOX rotation of the first n_rot dims of the last axis; x [B, T, H, Dh], positions [T]."""
    half = n_rot // 2
    inv = theta ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / n_rot)
    angles = positions.to(torch.float64)[:, None] * inv[None, :]
    cos = torch.cos(angles).to(x.dtype)[None, :, None, :]
    sin = torch.sin(angles).to(x.dtype)[None, :, None, :]
    x0, x1, rest = x[..., :half], x[..., half:n_rot], x[..., n_rot:]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos, rest], dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.q = nn.Linear(c.hidden, 2 * c.heads * c.head_dim, bias=False)
        self.k = nn.Linear(c.hidden, c.heads_kv * c.head_dim, bias=False)
        self.v = nn.Linear(c.hidden, c.heads_kv * c.head_dim, bias=False)
        self.q_norm = ZeroCentredNorm(c.head_dim, c.eps)
        self.k_norm = ZeroCentredNorm(c.head_dim, c.eps)
        self.o = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)

    def forward(self, a, positions):
        c = self.c
        B, T, _ = a.shape
        qg = self.q(a).view(B, T, c.heads, 2 * c.head_dim)
        q, gate = qg[..., : c.head_dim], qg[..., c.head_dim :]
        k = self.k(a).view(B, T, c.heads_kv, c.head_dim)
        v = self.v(a).view(B, T, c.heads_kv, c.head_dim)
        q = rope_neox(self.q_norm(q), positions, c.rope_dims, c.rope_theta)
        k = rope_neox(self.k_norm(k), positions, c.rope_dims, c.rope_theta)
        group = c.heads // c.heads_kv
        k = k.repeat_interleave(group, dim=2)  # query head h uses KV head h // group
        v = v.repeat_interleave(group, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, Dh]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        o = torch.softmax(scores, dim=-1) @ v
        o = o.transpose(1, 2).reshape(B, T, c.heads * c.head_dim)
        o = o * torch.sigmoid(gate.reshape(B, T, c.heads * c.head_dim))
        return self.o(o)


def delta_rule_recurrent(q, k, v, g, beta):
    """Token-by-token gated delta rule. q, k [B, T, H, Dk] (q already scaled); v [B, T, H, Dv]; g, beta [B, T, H]."""
    B, T, H, Dk = k.shape
    Dv = v.shape[-1]
    S = torch.zeros(B, H, Dv, Dk, dtype=q.dtype)
    out = []
    for t in range(T):
        S = S * torch.exp(g[:, t])[..., None, None]
        kt = k[:, t]
        d = (v[:, t] - torch.einsum("bhjk,bhk->bhj", S, kt)) * beta[:, t][..., None]
        S = S + d[..., :, None] * kt[..., None, :]
        out.append(torch.einsum("bhjk,bhk->bhj", S, q[:, t]))
    return torch.stack(out, dim=1)


def delta_rule_chunked(q, k, v, g, beta, chunk=64):
    """The same function in chunked WY form (parallel within a chunk); used for training."""
    B, T, H, Dk = k.shape
    Dv = v.shape[-1]
    pad = (chunk - T % chunk) % chunk
    q, k, v = (F.pad(t, (0, 0, 0, 0, 0, pad)).transpose(1, 2) for t in (q, k, v))  # [B, H, Tp, d]
    g = F.pad(g, (0, 0, 0, pad)).transpose(1, 2)  # [B, H, Tp]
    beta = F.pad(beta, (0, 0, 0, pad)).transpose(1, 2)
    n = q.shape[2] // chunk
    q, k, v = (t.reshape(B, H, n, chunk, t.shape[-1]) for t in (q, k, v))
    g = g.reshape(B, H, n, chunk).cumsum(-1)
    beta = beta.reshape(B, H, n, chunk)
    k_beta = k * beta[..., None]
    v_beta = v * beta[..., None]
    lower = torch.ones(chunk, chunk, dtype=torch.bool).tril()
    diff = (g[..., :, None] - g[..., None, :]).masked_fill(~lower, float("-inf"))
    decay = torch.exp(diff)  # [.., C, C], zero above the diagonal
    strict = torch.ones(chunk, chunk, dtype=torch.bool).tril(-1)
    m = ((k_beta @ k.transpose(-1, -2)) * decay).masked_fill(~strict, 0.0)
    eye = torch.eye(chunk, dtype=q.dtype)
    t_inv = torch.linalg.solve_triangular(eye + m, eye.expand_as(m), upper=False, unitriangular=True)
    u = t_inv @ v_beta
    w = t_inv @ (k_beta * torch.exp(g)[..., None])
    S = torch.zeros(B, H, Dk, Dv, dtype=q.dtype)
    outs = []
    for i in range(n):
        qi, ki, gi = q[:, :, i], k[:, :, i], g[:, :, i]
        attn = (qi @ ki.transpose(-1, -2)) * decay[:, :, i]
        v_new = u[:, :, i] - w[:, :, i] @ S
        outs.append((qi * torch.exp(gi)[..., None]) @ S + attn @ v_new)
        last = gi[..., -1]
        S = S * torch.exp(last)[..., None, None] + (ki * torch.exp(last[..., None] - gi)[..., None]).transpose(-1, -2) @ v_new
    o = torch.stack(outs, dim=2).reshape(B, H, n * chunk, Dv)[:, :, :T]
    return o.transpose(1, 2)


class GatedDeltaNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.qkv = nn.Linear(c.hidden, c.conv_dim, bias=False)
        self.gate = nn.Linear(c.hidden, c.value_dim, bias=False)
        self.beta = nn.Linear(c.hidden, c.ssm_heads, bias=False)
        self.alpha = nn.Linear(c.hidden, c.ssm_heads, bias=False)
        self.conv = nn.Parameter(torch.empty(c.conv_dim, c.conv_kernel))
        self.dt_bias = nn.Parameter(torch.empty(c.ssm_heads))
        self.A_log = nn.Parameter(torch.empty(c.ssm_heads))
        self.norm = nn.Parameter(torch.ones(c.ssm_state))  # raw weight (no +1)
        self.out = nn.Linear(c.value_dim, c.hidden, bias=False)

    def forward(self, a, recurrent=False):
        c = self.c
        B, T, _ = a.shape
        mixed = self.qkv(a)  # [B, T, conv_dim]: [q | k | v]
        z = self.gate(a)
        beta = torch.sigmoid(self.beta(a))
        g = F.softplus(self.alpha(a) + self.dt_bias, beta=1.0, threshold=20.0) * -torch.exp(self.A_log)
        K = c.conv_kernel
        y = F.conv1d(F.pad(mixed.transpose(1, 2), (K - 1, 0)), self.conv[:, None, :], groups=c.conv_dim)
        y = F.silu(y).transpose(1, 2)  # [B, T, conv_dim]
        kd = c.key_dim
        q = l2_norm(y[..., :kd].reshape(B, T, c.ssm_groups, c.ssm_state), c.eps)
        k = l2_norm(y[..., kd : 2 * kd].reshape(B, T, c.ssm_groups, c.ssm_state), c.eps)
        v = y[..., 2 * kd :].reshape(B, T, c.ssm_heads, c.ssm_state)
        repeat = c.ssm_heads // c.ssm_groups
        q = q.repeat(1, 1, repeat, 1)  # tiled: V head h uses Q/K head h mod Hk
        k = k.repeat(1, 1, repeat, 1)
        q = q * (1.0 / math.sqrt(c.ssm_state))
        o = delta_rule_recurrent(q, k, v, g, beta) if recurrent else delta_rule_chunked(q, k, v, g, beta)
        o = rms_norm(o, self.norm, c.eps, plus_one=False) * F.silu(z.reshape(B, T, c.ssm_heads, c.ssm_state))
        return self.out(o.reshape(B, T, c.value_dim))


class Ffn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate = nn.Linear(c.hidden, c.ffn, bias=False)
        self.up = nn.Linear(c.hidden, c.ffn, bias=False)
        self.down = nn.Linear(c.ffn, c.hidden, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, c, recurrent_layer):
        super().__init__()
        self.recurrent_layer = recurrent_layer
        self.attn_norm = ZeroCentredNorm(c.hidden, c.eps)
        self.mixer = GatedDeltaNet(c) if recurrent_layer else Attention(c)
        self.post_norm = ZeroCentredNorm(c.hidden, c.eps)
        self.ffn = Ffn(c)

    def forward(self, h, positions, recurrent=False):
        a = self.attn_norm(h)
        h = h + (self.mixer(a, recurrent) if self.recurrent_layer else self.mixer(a, positions))
        return h + self.ffn(self.post_norm(h))


class Mtp(nn.Module):
    """The NextN block blk.{n_layer}: embedding of x_p and trunk h_{p-1} -> logits for x_{p+1}."""

    def __init__(self, c):
        super().__init__()
        self.enorm = ZeroCentredNorm(c.hidden, c.eps)
        self.hnorm = ZeroCentredNorm(c.hidden, c.eps)
        self.eh_proj = nn.Linear(2 * c.hidden, c.hidden, bias=False)
        self.block = Block(c, recurrent_layer=False)
        self.shared_head_norm = ZeroCentredNorm(c.hidden, c.eps)

    def forward(self, e, h, positions):
        u = self.eh_proj(torch.cat([self.enorm(e), self.hnorm(h)], dim=-1))
        return self.shared_head_norm(self.block(u, positions))


class Qwen35(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.hidden)
        self.blocks = nn.ModuleList([Block(c, c.is_recurrent(il)) for il in range(c.layers)])
        self.output_norm = ZeroCentredNorm(c.hidden, c.eps)
        self.head = None if c.tied else nn.Linear(c.hidden, c.vocab, bias=False)
        self.mtp = Mtp(c) if c.mtp else None

    def logits(self, h):
        return h @ self.embed.weight.t() if self.head is None else self.head(h)

    def trunk(self, ids, recurrent=False):
        """h_nextn: the post-output_norm hidden states [B, T, D]."""
        positions = torch.arange(ids.shape[1])
        h = self.embed(ids)
        for block in self.blocks:
            h = block(h, positions, recurrent)
        return self.output_norm(h)

    def mtp_hidden(self, ids, h_nextn):
        """MTP rows p = 1..T-1 (token x_p at position p with h_{p-1}); row p predicts x_{p+1}."""
        positions = torch.arange(1, ids.shape[1])
        return self.mtp(self.embed(ids[:, 1:]), h_nextn[:, :-1], positions)

    def init_weights(self, seed):
        """GPT-style init: std 0.02, residual projections / sqrt(2 n_layer); GDN as Qwen3-Next."""
        gen = torch.Generator().manual_seed(seed)
        c = self.c
        residual_std = 0.02 / math.sqrt(2 * (c.layers + (1 if c.mtp else 0)))
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight") or name.endswith(".enorm.weight") or name.endswith(".hnorm.weight"):
                    p.zero_()
                elif name.endswith("mixer.norm"):
                    p.fill_(1.0)
                elif name.endswith("conv"):
                    bound = 1.0 / math.sqrt(c.conv_kernel)
                    p.uniform_(-bound, bound, generator=gen)
                elif name.endswith("A_log"):
                    p.copy_(torch.log(torch.empty(p.shape).uniform_(1.0, 16.0, generator=gen)))
                elif name.endswith("dt_bias"):
                    dt = torch.exp(torch.empty(p.shape).uniform_(math.log(1e-3), math.log(1e-1), generator=gen))
                    p.copy_(dt + torch.log(-torch.expm1(-dt)))
                elif name.endswith("o.weight") or name.endswith("out.weight") or name.endswith("down.weight"):
                    p.normal_(0.0, residual_std, generator=gen)
                else:
                    p.normal_(0.0, 0.02, generator=gen)


def gguf_tensors(model):
    """The model's tensors under their GGUF names, as the GGUF stores them (f32, row-major [out, in])."""
    c = model.c
    out = {}

    def put(name, t):
        out[name] = t.detach().to(torch.float32).contiguous()

    def block_tensors(prefix, block):
        put(f"{prefix}.attn_norm.weight", 1.0 + block.attn_norm.weight)
        put(f"{prefix}.post_attention_norm.weight", 1.0 + block.post_norm.weight)
        m = block.mixer
        if block.recurrent_layer:
            put(f"{prefix}.attn_qkv.weight", m.qkv.weight)
            put(f"{prefix}.attn_gate.weight", m.gate.weight)
            put(f"{prefix}.ssm_beta.weight", m.beta.weight)
            put(f"{prefix}.ssm_alpha.weight", m.alpha.weight)
            put(f"{prefix}.ssm_conv1d.weight", m.conv)
            put(f"{prefix}.ssm_dt.bias", m.dt_bias)
            put(f"{prefix}.ssm_a", -torch.exp(m.A_log))
            put(f"{prefix}.ssm_norm.weight", m.norm)
            put(f"{prefix}.ssm_out.weight", m.out.weight)
        else:
            put(f"{prefix}.attn_q.weight", m.q.weight)
            put(f"{prefix}.attn_k.weight", m.k.weight)
            put(f"{prefix}.attn_v.weight", m.v.weight)
            put(f"{prefix}.attn_q_norm.weight", 1.0 + m.q_norm.weight)
            put(f"{prefix}.attn_k_norm.weight", 1.0 + m.k_norm.weight)
            put(f"{prefix}.attn_output.weight", m.o.weight)
        put(f"{prefix}.ffn_gate.weight", block.ffn.gate.weight)
        put(f"{prefix}.ffn_up.weight", block.ffn.up.weight)
        put(f"{prefix}.ffn_down.weight", block.ffn.down.weight)

    put("token_embd.weight", model.embed.weight)
    put("output_norm.weight", 1.0 + model.output_norm.weight)
    if model.head is not None:
        put("output.weight", model.head.weight)
    for il, block in enumerate(model.blocks):
        block_tensors(f"blk.{il}", block)
    if model.mtp is not None:
        n = c.layers
        block_tensors(f"blk.{n}", model.mtp.block)
        put(f"blk.{n}.nextn.eh_proj.weight", model.mtp.eh_proj.weight)
        put(f"blk.{n}.nextn.enorm.weight", 1.0 + model.mtp.enorm.weight)
        put(f"blk.{n}.nextn.hnorm.weight", 1.0 + model.mtp.hnorm.weight)
        put(f"blk.{n}.nextn.shared_head_norm.weight", 1.0 + model.mtp.shared_head_norm.weight)
    return out


def load_gguf_tensors(model, tensors):
    """The inverse of gguf_tensors: sets the model's parameters from GGUF-named f32 arrays (e.g. a
    dequantized Q4_K_M file), undoing the stored transforms (1 + w norms, ssm_a = -exp(A_log))."""
    c = model.c

    def get(name):
        return torch.from_numpy(tensors[name].copy()).to(torch.float32)

    def set_(param, value):
        with torch.no_grad():
            param.copy_(value.reshape(param.shape))

    def block_from(prefix, block):
        set_(block.attn_norm.weight, get(f"{prefix}.attn_norm.weight") - 1.0)
        set_(block.post_norm.weight, get(f"{prefix}.post_attention_norm.weight") - 1.0)
        m = block.mixer
        if block.recurrent_layer:
            set_(m.qkv.weight, get(f"{prefix}.attn_qkv.weight"))
            set_(m.gate.weight, get(f"{prefix}.attn_gate.weight"))
            set_(m.beta.weight, get(f"{prefix}.ssm_beta.weight"))
            set_(m.alpha.weight, get(f"{prefix}.ssm_alpha.weight"))
            set_(m.conv, get(f"{prefix}.ssm_conv1d.weight"))
            set_(m.dt_bias, get(f"{prefix}.ssm_dt.bias"))
            set_(m.A_log, torch.log(-get(f"{prefix}.ssm_a")))
            set_(m.norm, get(f"{prefix}.ssm_norm.weight"))
            set_(m.out.weight, get(f"{prefix}.ssm_out.weight"))
        else:
            set_(m.q.weight, get(f"{prefix}.attn_q.weight"))
            set_(m.k.weight, get(f"{prefix}.attn_k.weight"))
            set_(m.v.weight, get(f"{prefix}.attn_v.weight"))
            set_(m.q_norm.weight, get(f"{prefix}.attn_q_norm.weight") - 1.0)
            set_(m.k_norm.weight, get(f"{prefix}.attn_k_norm.weight") - 1.0)
            set_(m.o.weight, get(f"{prefix}.attn_output.weight"))
        set_(block.ffn.gate.weight, get(f"{prefix}.ffn_gate.weight"))
        set_(block.ffn.up.weight, get(f"{prefix}.ffn_up.weight"))
        set_(block.ffn.down.weight, get(f"{prefix}.ffn_down.weight"))

    set_(model.embed.weight, get("token_embd.weight"))
    set_(model.output_norm.weight, get("output_norm.weight") - 1.0)
    if model.head is not None:
        set_(model.head.weight, get("output.weight"))
    for il, block in enumerate(model.blocks):
        block_from(f"blk.{il}", block)
    if model.mtp is not None:
        n = c.layers
        block_from(f"blk.{n}", model.mtp.block)
        set_(model.mtp.eh_proj.weight, get(f"blk.{n}.nextn.eh_proj.weight"))
        set_(model.mtp.enorm.weight, get(f"blk.{n}.nextn.enorm.weight") - 1.0)
        set_(model.mtp.hnorm.weight, get(f"blk.{n}.nextn.hnorm.weight") - 1.0)
        set_(model.mtp.shared_head_norm.weight, get(f"blk.{n}.nextn.shared_head_norm.weight") - 1.0)
