"""Calibrate validation-5's OOM headroom in plain Python (vramnb not imported): setup, gc, 64 MiB ballast,
RLIMIT_AS = VmSize + headroom (as run_field.py), then the cell (must fail) or the fixed cell (must fit)."""
import gc
import os
import resource
import sys
import traceback
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "field"))
import cases  # noqa: E402  (benchmarks/field/cases.py: no vramnb import)


FIXED = {
 "metric_keeps_every_batch_oom": """
vals = []
with torch.no_grad():
    for step in range(60):
        target = torch.rand(16, 3, 128, 128)
        preds = model(target + 0.1 * torch.randn_like(target))
        vals.append(ssim_value(preds, target).item())
score = sum(vals) / len(vals)
""",
 "model_recreated_in_loop_before_old_freed_oom": """
for lr in (1e-2, 1e-3):
    model = mlp(width=4096, depth=6)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    train_steps(model, optimizer)
    del model, optimizer
""",
 "attention_scores_long_sequence_oom": "import torch.nn.functional as F\nout = F.scaled_dot_product_attention(q, k, v)\n",
 "pairwise_distance_expand_broadcast_oom": """
x_norm = (x ** 2).sum(-1).unsqueeze(-1)
y_norm = (y ** 2).sum(-1).unsqueeze(-2)
D = torch.clamp(x_norm + y_norm - 2.0 * torch.bmm(x, y.mT), 0.0, float("inf"))
""",
 "causal_mask_repeat_instead_of_expand_oom": """
min_dtype = torch.finfo(dtype).min
mask = (causal_mask[None, None, :, :].to(dtype) * min_dtype).expand(batch_size, 1, -1, -1)
""",
 "causal_mask_buffer_in_every_layer_oom": """
class Attention2(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.qkv = nn.Linear(d_model, 3 * d_model)
    def forward(self, x):
        L = x.shape[1]
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        m = torch.tril(torch.ones((L, L), dtype=torch.bool))
        s = (q @ k.transpose(-2, -1)).masked_fill(~m, float("-inf"))
        return s.softmax(-1) @ v
blocks = nn.ModuleList(Attention2(64) for _ in range(48))
x = torch.randn(2, 128, 64)
for b in blocks:
    x = x + b(x)
""",
 "embeddings_list_concatenated_at_end_oom": """
embeddings = torch.empty(60 * 64, 32, 768)
with torch.no_grad():
    for i in range(60):
        tokens = torch.randn(64, 32, 256)
        embeddings[i * 64:(i + 1) * 64] = encoder(tokens)
""",
 "embeddingbag_dense_gradient_oom": """
embedding = nn.EmbeddingBag(200_000, 512, mode="sum", sparse=True)
""",
 "histogram_filtering_copies_oom": """
flat = grad.reshape(-1).float()
if torch.isinf(flat).any() or torch.isnan(flat).any():
    flat = flat[torch.isfinite(flat)]
hist = torch.histc(flat, bins=64, min=flat.min().item(), max=flat.max().item())
""",
 "generator_frame_keeps_previous_batch_oom": """
def batches2(n):
    for i in range(n):
        batch = torch.randn(96, 1024, 1024)
        indices = torch.arange(96)
        r = batch.mean(dim=(1, 2))
        del batch, indices
        yield r
results = []
for r in batches2(3):
    results.append(r)
""",
 "out_of_place_activations_in_inference_oom": """
mlp_block[1].inplace = True
with torch.no_grad():
    out = mlp_block(tokens)
""",
 "float_copy_of_concatenated_sample_oom": "sample = torch.cat(sample).numpy()\n",
}
# the embeddingbag fix must be in the setup (the table is built there): handled below
SETUP_FIX = {"embeddingbag_dense_gradient_oom": ('nn.EmbeddingBag(200_000, 512, mode="sum")',
                                               'nn.EmbeddingBag(200_000, 512, mode="sum", sparse=True)')}

def vm():
    with open("/proc/self/status") as f:
        return [int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:")][0]

def main(name, which, headroom=None):
    import torch
    torch.set_num_threads(1)
    c = cases.by_name()[name]
    g = {}
    setup = c.setup_code
    if which == "fixed" and name in SETUP_FIX:
        setup = setup.replace(*SETUP_FIX[name])
    exec(setup, g)
    gc.collect()
    _ballast = [bytearray(64 * 2**20)]  # held under the limit, as run_field.py holds its ballast
    h = headroom if headroom is not None else c.oom_headroom_mib
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm() + h * 2**20, hard))
    src = c.cell_code if which == "bug" else (c.cell_code if name == "embeddingbag_dense_gradient_oom" else FIXED[name])
    try:
        exec(src, g)
        res = "fits"
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        res = f"FAILS {type(e).__name__}: {str(e)[:80]} @line {tb.lineno}: {tb.line}"
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    print(f"{name:48s} {which:5s} H={h:4d} {res}", flush=True)

if __name__ == "__main__":
    # usage: calibrate_plain.py CASE bug|fixed [HEADROOM_MIB]
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
