"""Calibrate validation-7's OOM headroom in plain Python (vramnb not imported): setup, gc, 64 MiB ballast,
RLIMIT_AS = VmSize + headroom (as run_field.py), then the cell (must fail) or the thread's fix (must fit).
Adapted from validation-6's calibrate_plain.py (same procedure)."""
import gc
import os
import resource
import sys
import traceback
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "field"))
import cases  # noqa: E402  (benchmarks/field/cases.py: no vramnb import)


FIXED = {
 "diag_matrix_row_scaling_oom": "WX = w[:, None] * X\ncol_scores = WX.sum(0)\n",
 "svd_full_matrices_tall_oom": "U, S, Vh = torch.linalg.svd(A, full_matrices=False)\nU_k = U[:, :rank]\n",
 "scatter_output_sized_by_corrupt_index_oom": """
valid = (voxel_id >= 0) & (voxel_id < num_voxels)
pooled = torch.zeros(num_voxels, C).index_add_(0, voxel_id[valid], feats[valid])
""",
 "bincount_paired_keys_huge_range_oom": """
keys = (x + y) * (x + y + 1) // 2 + y
uniq, joint = torch.unique(keys, return_counts=True)
""",
 "boolean_mask_indexing_nonzero_oom": """
voxel_loss = F.binary_cross_entropy(pred, target, reduction="none")
loss = (voxel_loss * mask).sum() / mask.sum()
""",
 "episodes_cast_to_float_at_load_oom": """
episodes = torch.from_numpy(np.stack(frames))
idx = torch.randint(0, len(episodes), (32,))
batch = episodes[idx].float() / 255.0
""",
 "json_tolist_serialisation_oom": """
import base64
arr = embeddings.numpy()
payload = json.dumps({"shape": list(arr.shape), "dtype": str(arr.dtype),
                      "data": base64.b64encode(arr.tobytes()).decode("ascii")})
""",
 "logits_upsampled_before_argmax_oom": """
with torch.no_grad():
    pred_small = seg_logit.argmax(1, keepdim=True).to(torch.uint8)
    pred = F.interpolate(pred_small, size=ori_shape, mode="nearest")[:, 0]
""",
 "stft_whole_recording_oom": """
feats = []
chunk, pad = sr * 30, 200
for start in range(0, len(audio), chunk):
    seg = audio[max(0, start - pad): start + chunk + pad]
    spec = torch.stft(seg, n_fft=400, hop_length=160, window=window, return_complex=True)
    feats.append(torch.log(mel_fb @ (spec.abs() ** 2) + 1e-6))
    del spec
logmel = torch.cat(feats, 1)
""",
 "numpy_float64_default_copy_oom": """
obs = rng.standard_normal((n_obs, obs_dim), dtype=np.float32)
obs_t = torch.from_numpy(obs)
""",
 "deepcopy_model_for_evaluation_oom": """
model.eval()
with torch.no_grad():
    out = model(x)
model.train()
""",
 "unintended_broadcast_add_oom": "c = a + b.view(8000, 1, 1)\n",
}
SETUP_FIX: dict = {}


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
