"""Calibrate validation-10's cells in plain Python (vramnb not imported).

Out-of-memory cells: setup, gc, 64 MiB ballast held, RLIMIT_AS = VmSize + headroom (as run_field.py sets it), then the
cell (must fail) or the thread's fix (must fit). Usage: calibrate_plain.py CASE bug|fixed [HEADROOM_MIB]
Growing cells: calibrate_plain.py CASE grow  -- setup, then the cell three times (1 s apart, as the runner's report
takes time between cells), printing RSS after each run.
Adapted from validation-9's calibrate_plain.py (same procedure)."""
import gc
import os
import resource
import sys
import time
import traceback
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "field"))
import cases  # noqa: E402  (benchmarks/field/cases.py: no vramnb import)

FIXED = {
 "mvn_diagonal_covariance_dense_oom": """
samples = mu + torch.randn_like(mu) * var.sqrt()
""",
 "gcn_messages_gathered_per_edge_oom": """
with torch.no_grad():
    adj = torch.sparse_coo_tensor(torch.stack([edge_index[1], edge_index[0]]), norm, (N, N))
    out = torch.sparse.mm(adj, x @ weight)
""",
 "global_default_dtype_float64_oom": """
torch.set_default_dtype(torch.float32)
model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048))
x = torch.randn(6144, 2048)
with torch.no_grad():
    out = model(x)
""",
 "bf16_logits_upcast_to_fp32_for_loss_oom": """
total = 0.0
for lc, tc in zip(logits.split(512), tokens.split(512)):
    total = total + F.cross_entropy(lc.float(), tc, reduction="sum")
loss = total / T
""",
 "one_hot_inputs_into_linear_wide_model_oom": """
emb = nn.Embedding(n_ids, 1)
with torch.no_grad():
    emb.weight.copy_(wide.weight.T)
loss = (emb(X_idx).sum(1) + wide.bias - y).pow(2).mean()
loss.backward()
""",
 "dataset_padded_to_longest_sample_oom": """
from torch.nn.utils.rnn import pad_sequence
def collate(idx):
    return [pad_sequence([torch.tensor(dataset[name][i]) for i in idx], batch_first=True) for name in PADDED_INPUTS]
batches = [collate(range(s, s + 32)) for s in range(0, 4000, 32)]
""",
 "embedding_then_sum_instead_of_embeddingbag_oom": """
with torch.no_grad():
    bag = nn.EmbeddingBag.from_pretrained(emb.weight, mode="sum")
    doc = bag(bags)
""",
 "gat_dense_all_pairs_attention_input_oom": """
Wh = h @ W
e = F.leaky_relu(Wh @ a[:F_out] + (Wh @ a[F_out:]).T, 0.2)
attention = torch.softmax(torch.where(adj > 0, e, torch.full_like(e, -9e15)), dim=1)
h_prime = F.elu(attention @ Wh)
""",
 "nri_one_hot_relation_matrices_oom": """
receivers = x[:, recv]
senders = x[:, send]
edges = torch.cat([senders, receivers], dim=2)
""",
 "attention_inputs_repeated_per_head_oom": """
with torch.no_grad():
    inputs_per_head = inputs.view(1, B * T, D).expand(num_heads, B * T, D)
    projected = torch.bmm(inputs_per_head, w_per_head)
""",
    "mc_dropout_passes_batched_by_repeat_oom": """
with torch.no_grad():
    probs = torch.zeros(256, 10)
    for _ in range(num_passes):
        probs += model(x).softmax(-1) / num_passes
""",
}
NO_GC = set()


def vm():
    with open("/proc/self/status") as f:
        return [int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:")][0]


def rss():
    with open("/proc/self/status") as f:
        return [int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:")][0]


def main(name, which, headroom=None):
    import torch
    torch.set_num_threads(1)
    c = cases.by_name()[name]
    g = {}
    exec(compile(c.setup_code, "<setup>", "exec"), g)
    gc.collect()
    if which == "grow":
        out = []
        for _ in range(c.runs):
            t0 = time.perf_counter()
            exec(compile(c.cell_code, "<cell>", "exec"), g)
            dt = time.perf_counter() - t0
            if name not in NO_GC:
                gc.collect()
            out.append(f"{rss() / 2**20:.1f} MiB ({dt:.2f} s)")
            time.sleep(1.0)
        print(f"{name:48s} grow RSS after runs: {' | '.join(out)}", flush=True)
        return
    _ballast = [bytearray(64 * 2**20)]  # held under the limit, as run_field.py holds its ballast
    h = headroom if headroom is not None else c.oom_headroom_mib
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm() + h * 2**20, hard))
    src = c.cell_code if which == "bug" else FIXED[name]
    t0 = time.perf_counter()
    try:
        exec(compile(src, "<cell>", "exec"), g)
        res = "fits"
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)
        here = [f for f in tb if f.filename == "<cell>"]
        line = (f"cell line {here[-1].lineno}: " + src.splitlines()[here[-1].lineno - 1].strip()) if here else tb[-1].line
        inner = [f for f in tb if f.filename == "<setup>"]
        if inner:
            setup_line = c.setup_code.splitlines()[inner[-1].lineno - 1].strip()
            line += f" (in setup's {inner[-1].name}, line {inner[-1].lineno}: " + setup_line + ")"
        res = f"FAILS {type(e).__name__}: {str(e)[:60]} @ {line}"
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    print(f"{name:48s} {which:5s} H={h:4d} {res} ({time.perf_counter() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
