"""nanoGPT's baby CPU recipe re-implemented from its documented behaviour (not odet, not nanoGPT's
files): its model (no biases, tied head, scaled residual init), its AdamW groups, get_lr, get_batch
and estimate_loss, and torch.manual_seed(SEED) before the model as in its train.py. It reports
nanoGPT's own figure (the 20-batch estimate at iteration 2,000) and odet's exact validation pass
of the same model. Usage: python nanogpt_baby.py SEED OUT.json [INPUT.txt]"""

import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

seed = int(sys.argv[1])
out = sys.argv[2]
path = sys.argv[3] if len(sys.argv) > 3 else "../shared/data/tinyshakespeare/input.txt"
torch.set_num_threads(1)
with open(path, encoding="utf-8") as f:
    text = f.read()
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
n = len(text)
train = np.array([stoi[c] for c in text[: int(n * 0.9)]], dtype=np.uint16)
val = np.array([stoi[c] for c in text[int(n * 0.9) :]], dtype=np.uint16)
V, T, B, L, H, D = len(chars), 64, 12, 4, 4, 128
max_iters, lr0, min_lr, warm, decay_it = 2000, 1e-3, 1e-4, 100, 2000


class LN(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(D, 3 * D, bias=False)
        self.c_proj = nn.Linear(D, D, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(D, 4 * D, bias=False)
        self.c_proj = nn.Linear(4 * D, D, bias=False)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = LN(D)
        self.attn = Attn()
        self.ln_2 = LN(D)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(V, D),
                wpe=nn.Embedding(T, D),
                h=nn.ModuleList([Block() for _ in range(L)]),
                ln_f=LN(D),
            )
        )
        self.lm_head = nn.Linear(D, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * L))

    def _init(self, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t))
        for blk in self.transformer.h:
            x = blk(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, V), targets.reshape(-1), reduction="none")


torch.manual_seed(seed)
model = GPT()
params = {pn: p for pn, p in model.named_parameters()}
groups = [
    {"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": 0.1},
    {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0},
]
opt = torch.optim.AdamW(groups, lr=lr0, betas=(0.9, 0.99))


def get_batch(split):
    data = train if split == "train" else val
    ix = torch.randint(len(data) - T, (B,))
    x = torch.stack([torch.from_numpy(data[i : i + T].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + T].astype(np.int64)) for i in ix])
    return x, y


def get_lr(it):
    if it < warm:
        return lr0 * (it + 1) / (warm + 1)
    if it > decay_it:
        return min_lr
    r = (it - warm) / (decay_it - warm)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * r)) * (lr0 - min_lr)


@torch.no_grad()
def estimate():
    model.eval()
    out = {}
    for split in ("train", "val"):
        out[split] = float(torch.stack([model(*get_batch(split)).mean() for _ in range(20)]).mean())
    model.train()
    return out


@torch.no_grad()
def exact():
    """Windows [i*T, (i+1)*T] overlapping by one character: every character after the first
    predicted once, from 0 to T-1 characters of context (odet's exact pass)."""
    model.eval()
    data = torch.from_numpy(val.astype(np.int64))
    windows = [data[s : s + T + 1] for s in range(0, len(data) - 1, T)]
    full = [w for w in windows if len(w) == T + 1]
    total, count = 0.0, 0
    for i in range(0, len(full), 64):
        x = torch.stack([w[:-1] for w in full[i : i + 64]])
        y = torch.stack([w[1:] for w in full[i : i + 64]])
        losses = model(x, y)
        total += float(losses.sum())
        count += losses.numel()
    for w in windows[len(full) :]:
        losses = model(w[None, :-1], w[None, 1:])
        total += float(losses.sum())
        count += losses.numel()
    model.train()
    return total / count, count


t0 = time.time()
it = 0
X, Y = get_batch("train")
log = []
while True:
    lr = get_lr(it)
    for g in opt.param_groups:
        g["lr"] = lr
    if it % 250 == 0:
        e = estimate()
        log.append({"iter": it, **e})
        print(it, e, round(time.time() - t0), flush=True)
        if it == max_iters:
            ex, cnt = exact()
            break
    loss = model(X, Y).mean()
    X, Y = get_batch("train")
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    it += 1
res = {
    "seed": seed,
    "params": sum(p.numel() for p in model.parameters()),
    "exact_val": ex,
    "exact_tokens": cnt,
    "estimate_at_2000": log[-1],
    "log": log,
    "train_seconds": time.time() - t0,
}
print(json.dumps(res))
with open(out, "w") as f:
    json.dump(res, f, indent=1)
