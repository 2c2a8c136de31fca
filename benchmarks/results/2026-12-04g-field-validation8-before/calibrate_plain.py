"""Calibrate validation-8's cells in plain Python (vramnb not imported).

Out-of-memory cells: setup, gc, 64 MiB ballast held, RLIMIT_AS = VmSize + headroom (as run_field.py sets it), then the
cell (must fail) or the thread's fix (must fit). Usage: calibrate_plain.py CASE bug|fixed [HEADROOM_MIB]
Growing cells: calibrate_plain.py CASE grow  -- setup, then the cell three times (1 s apart, as the runner's report
takes time between cells), printing RSS after each run.
Adapted from validation-7's calibrate_plain.py (same procedure)."""
import gc
import os
import resource
import sys
import time
import traceback
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "field"))
import cases  # noqa: E402  (benchmarks/field/cases.py: no vramnb import)

FIXED = {
 "dense_adjacency_for_node_degrees_oom": "deg = degree(edge_index[0], num_nodes=num_nodes)\n",
 "lm_head_logits_for_every_prompt_position_oom": """
with torch.no_grad():
    logits = lm_head(hidden[:, -1:, :])
    next_token = logits[:, -1, :].argmax(-1)
""",
 "multihead_attention_need_weights_default_oom": """
out, _ = attn(x, x, x, need_weights=False)
loss = out.pow(2).mean()
loss.backward()
""",
 "corrcoef_of_stacked_arrays_for_one_row_oom": """
xs = (x_train - x_train.mean(0)) / x_train.std(0)
ys = (y_unit - y_unit.mean()) / y_unit.std()
corr = ys @ xs / n_samples
""",
 "deepcopy_of_row_views_copies_whole_storage_oom": """
top = (embeddings @ query).topk(8).indices.tolist()
prototypes = [embeddings[i].clone() for i in top]
""",
 "mse_target_shape_broadcast_in_training_step_oom": """
pred = model(X)
loss = F.mse_loss(pred.squeeze(-1), y)
opt.zero_grad()
loss.backward()
opt.step()
""",
 "meshgrid_dense_coordinates_oom": """
xx, yy, zz = np.meshgrid(x, x, x, indexing="ij", sparse=True)
sdf = torch.from_numpy(np.sqrt(xx**2 + yy**2 + zz**2) - 0.5)
""",
 "whole_test_set_in_one_forward_oom": """
with torch.no_grad():
    preds = torch.cat([model(xb).argmax(1) for xb in X_test.split(256)])
""",
 "pickle_of_slice_serialises_whole_storage_oom": """
payloads = [pickle.dumps(dataset[i * 16:(i + 1) * 16].clone()) for i in range(4)]
""",
 "grpo_logits_for_prompt_tokens_oom": """
keep = prompt_completion_ids.shape[1] - prompt_length + 1
logits = model(prompt_completion_ids, num_logits_to_keep=keep)[:, :-1, :]
logps = logits.log_softmax(-1).gather(-1, prompt_completion_ids[:, prompt_length:, None]).squeeze(-1)
loss = -logps.mean()
loss.backward()
""",
 "dense_numpy_adjacency_for_graph_embedding_oom": """
idx = torch.from_numpy(edges.T.copy())
A = torch.sparse_coo_tensor(idx, torch.from_numpy(weights).float(), (n, n)).coalesce()
X_batch = A.index_select(0, torch.arange(256)).to_dense()
""",
}


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
    exec(c.setup_code, g)
    gc.collect()
    if which == "grow":
        out = []
        for _ in range(c.runs):
            t0 = time.perf_counter()
            exec(c.cell_code, g)
            dt = time.perf_counter() - t0
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
        exec(src, g)
        res = "fits"
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)
        here = [f for f in tb if f.filename == "<string>"]
        line = here[-1].line if here else tb[-1].line
        res = f"FAILS {type(e).__name__}: {str(e)[:70]} @ {line}"
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    print(f"{name:48s} {which:5s} H={h:4d} {res} ({time.perf_counter() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
