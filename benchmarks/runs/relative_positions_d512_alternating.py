import torch, time, statistics
from benchmarks.systems import SIZES, odet_model
torch.set_num_threads(1)
size = SIZES["d512"]
B, T = 128, 16
g = torch.Generator().manual_seed(0)
src = torch.randint(4, 1000, (B, T), generator=g); tgt = torch.randint(4, 1000, (B, T), generator=g)
models = {p: odet_model(size, positions=p).train() for p in ("sinusoidal", "both")}
opts = {p: torch.optim.Adam(m.parameters(), 1e-4) for p, m in models.items()}
def step(p):
    m, o = models[p], opts[p]
    o.zero_grad(); out = m(src, tgt); torch.nn.functional.cross_entropy(out.float().flatten(0,1), tgt.flatten()).backward(); o.step()
for p in models: step(p)
ratios = []; times = {p: [] for p in models}
for r in range(4):
    for p in models:
        t = time.perf_counter(); step(p); times[p].append(time.perf_counter() - t)
    ratios.append(times["both"][-1] / times["sinusoidal"][-1])
print({p: [round(x, 2) for x in v] for p, v in times.items()})
print("same-round ratios", [round(x, 3) for x in ratios], "median", round(statistics.median(ratios), 3))
