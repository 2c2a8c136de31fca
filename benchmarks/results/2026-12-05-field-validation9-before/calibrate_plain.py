"""Calibrate validation-9's cells in plain Python (vramnb not imported).

Out-of-memory cells: setup, gc, 64 MiB ballast held, RLIMIT_AS = VmSize + headroom (as run_field.py sets it), then the
cell (must fail) or the thread's fix (must fit). Usage: calibrate_plain.py CASE bug|fixed [HEADROOM_MIB]
Growing cells: calibrate_plain.py CASE grow  -- setup, then the cell three times (1 s apart, as the runner's report
takes time between cells), printing RSS after each run.
Adapted from validation-8's calibrate_plain.py (same procedure); the gc.disable() case is measured without the
gc.collect() after each run (NO_GC: the user's code never calls it)."""
import gc
import os
import resource
import sys
import time
import traceback
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "field"))
import cases  # noqa: E402  (benchmarks/field/cases.py: no vramnb import)

FIXED = {
 "load_state_dict_into_initialised_model_oom": """
with torch.device("meta"):
    model = LM()
model.load_state_dict(torch.load(CKPT, weights_only=True), assign=True)
model.eval()
""",
 "adamw_foreach_intermediates_oom": """
for g in opt.param_groups:
    g["foreach"] = False
loss = model(x).pow(2).mean()
loss.backward()
opt.step()
opt.zero_grad()
""",
 "all_layer_hidden_states_returned_oom": """
with torch.no_grad():
    out = model(tokens, return_hidden_states=False)
    emb = out["embeddings"].mean(1)
""",
 "where_with_zeros_like_operand_oom": """
with torch.no_grad():
    valid_token_mask = torch.arange(num_tokens)[:, None] < num_valid_tokens
    down_out_list.masked_fill_(~valid_token_mask, 0)
    final_hidden_states.index_add_(0, sorted_token_indices, down_out_list)
""",
 "decode_loop_keeps_every_step_scores_oom": """
@torch.inference_mode()
def decode_fixed(input_ids, model, max_length, output_scores=False):
    B, L = input_ids.shape
    sequences = torch.zeros(B, max_length, dtype=torch.long)
    sequences[:, :L] = input_ids
    scores = []
    for t in range(L, max_length):
        logits = model.step(sequences[:, :t])
        if output_scores:
            scores.append(logits)
        sequences[:, t] = logits.argmax(-1)
    return sequences, (tuple(scores) if output_scores else None)
out, _ = decode_fixed(prompts, model, max_length=1024)
""",
 "hessian_rows_create_graph_at_inference_oom": """
E = energy(pos)
forces = -torch.autograd.grad(E, pos, create_graph=True)[0]
rows = []
for i in range(3 * n_atoms):
    row = torch.autograd.grad(forces.view(-1)[i], pos, retain_graph=True, create_graph=False)[0]
    rows.append(row.view(-1))
hessian = -torch.stack(rows)
""",
 "maml_second_order_adaptation_steps_oom": """
fast = list(params)
for step in range(20):
    loss = F.cross_entropy(net(support_x, fast), support_y)
    grads = torch.autograd.grad(loss, fast)            # first_order=True
    fast = [w - 0.1 * g for w, g in zip(fast, grads)]
meta_loss = F.cross_entropy(net(query_x, fast), query_y)
meta_opt.zero_grad()
meta_loss.backward()
meta_opt.step()
""",
 "detector_inference_without_no_grad_oom": """
with torch.no_grad():
    feats = backbone(gallery)
    feats = nn.functional.normalize(feats, dim=1)
""",
 "full_sort_for_top_values_oom": """
# the thread's workaround (zasdfgbnm): topk of each row of a reshaped view, then topk of those
row_vals, row_idx = scores.view(300, -1).topk(200, dim=1)
top_scores, pos = row_vals.view(-1).topk(200)
top_idx = (pos // 200) * scores.view(300, -1).shape[1] + row_idx.view(-1)[pos]
""",
 "expand_based_distance_matrix_oom": """
with torch.no_grad():
    dist = torch.cdist(test_patches, memory_bank)
    score_patches = dist.topk(9, largest=False).values
""",
 "rejection_sampling_keeps_candidate_graphs_oom": """
accepted, num_accepted = [], 0
with torch.no_grad():
    while num_accepted < 2000:
        candidates = posterior.sample(10_000, x_o)
        ok = within_prior(candidates)
        accepted.append(candidates[ok])
        num_accepted += int(ok.sum())
samples = torch.cat(accepted)[:2000]
""",
}
NO_GC = {"gc_disabled_cyclic_batches_never_collected"}


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
