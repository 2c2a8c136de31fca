"""Calibrate validation-6's OOM headroom in plain Python (vramnb not imported): setup, gc, 64 MiB ballast,
RLIMIT_AS = VmSize + headroom (as run_field.py), then the cell (must fail) or the thread's fix (must fit).
Adapted from validation-5's calibrate_plain.py (same procedure)."""
import gc
import os
import resource
import sys
import traceback
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "field"))
import cases  # noqa: E402  (benchmarks/field/cases.py: no vramnb import)


FIXED = {
 "einsum_four_operands_intermediate_oom": "D = A @ (B ** 2) @ C\n",
 "pruning_threshold_full_sort_oom": """
with torch.no_grad():
    threshold = torch.kthvalue(scores, int(sparsity * scores.numel())).values
    masks = [m.weight.abs() > threshold for m in model]
""",
 "sparse_operand_densified_for_matmul_oom": "C = torch.sparse.mm(A, B)\n",
 "embedding_matrix_tolist_oom": """
with open("/tmp/v6_projector/tensors.tsv", "w") as f:
    for i in range(len(embeddings)):
        f.write("\\t".join(str(v) for v in embeddings[i].tolist()) + "\\n")
""",
 "per_sample_gradients_whole_batch_vmap_oom": """
norms = []
for xb, yb in zip(x.split(32), y.split(32)):
    per_sample = vmap(grad(loss_fn), in_dims=(None, 0, 0))(params, xb, yb)
    norms.append(torch.stack([g.flatten(1).norm(dim=1) for g in per_sample.values()]).norm(dim=0))
    del per_sample
grad_norms = torch.cat(norms)
""",
 "tall_jacobian_jacrev_oom": "J = jacfwd(residual)(w)\n",
 "torch_tensor_copies_numpy_array_oom": """
with torch.no_grad():
    x = torch.from_numpy(batch)
    out = model(x[:1])
""",
 "padding_to_model_max_length_oom": """
input_ids = tokenize_batch(seqs, max(len(s) for s in seqs))
with torch.no_grad():
    hidden = encoder(input_ids)
embedding = hidden[:, 0]
""",
 "one_hot_segmentation_targets_oom": "loss = F.cross_entropy(logits, labels)\n",
 "unfold_as_convolution_oom": """
with torch.no_grad():
    out = F.conv2d(x, weight, padding=1)
""",
 "saved_view_loads_whole_storage_oom": None,   # the fix is in the setup (save .clone()); the cell is the same
 "combinations_materialises_grid_oom": """
parts = []
for a in range(n - 2):
    rest = torch.combinations(atoms[a + 1:], r=2)
    parts.append(torch.cat([torch.full((len(rest), 1), a), rest], 1))
triplets = torch.cat(parts)
""",
 "retrieval_similarity_matrix_oom": """
scores, pairs = [], []
for q in query_desc.split(512):
    s, p = torch.einsum("id,jd->ij", q, db_desc).topk(num_matched, dim=1)
    scores.append(s)
    pairs.append(p)
scores, pairs = torch.cat(scores), torch.cat(pairs)
""",
}
# fixes that must be in the setup
SETUP_FIX = {"saved_view_loads_whole_storage_oom": ('torch.save(text_embeddings[i], ',
                                                    'torch.save(text_embeddings[i].clone(), ')}


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
    src = c.cell_code if which == "bug" or FIXED[name] is None else FIXED[name]
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
