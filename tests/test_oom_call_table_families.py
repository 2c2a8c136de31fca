"""The call table's families beyond einsum/sort/unfold (:mod:`vramnb.diagnose._call_shapes`,
:mod:`vramnb.diagnose._call_data`): each cell runs out of memory at the operator that fails in the field (a
dispatch mode below the tracker's raises the CPU allocator's error there, as in tests/test_oom_call_reading.py),
the advice's numbers are computed here from the shapes, and its code is executed and compared with the
original's result. The negative cases hold the same call where the evidence does not: no advice."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.conftest import run
from tests.test_oom_call_reading import _failing, _fix, _ns
from vramnb._units import format_bytes as fb

A = torch.ops.aten


def _no_fix(oom, text):
    assert not any(text in f.what for f in oom.verdict.fixes), [f.what for f in oom.verdict.fixes]


# -- diag -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cell, new", [
    ("WX = torch.diag(w) @ X", "WX = w[:, None] * X"),
    ("WX = torch.mm(torch.diag(w), X)", "WX = w[:, None] * X"),
    ("WX = X.T @ torch.diag(w)", "WX = X.T * w"),
])
def test_a_diagonal_matrix_built_to_scale_rows_gets_a_broadcast_multiply(ip, cell, new):
    n, d = 64, 8
    oom = _failing(ip, f"X = torch.randn({n}, {d})\nw = torch.rand({n})", cell, A.diag_embed, n * n * 4)
    f = _fix(oom, "builds a (64, 64) float32 matrix")
    assert f.what.startswith(f"torch.diag(w) builds a ({n}, {n}) float32 matrix ({fb(n * n * 4)}) whose only values "
                             f"from w are its {n:,} diagonal elements")
    assert f"without the matrix: its result alone, {'(64, 8)' if 'X.T' not in cell else '(8, 64)'} float32, " \
           f"{fb(n * d * 4)}" in f.what
    assert f.code == new
    want = _ns(ip, cell)["WX"]
    torch.testing.assert_close(_ns(ip, f.code)["WX"], want)


def test_a_diag_that_is_not_multiplied_or_of_a_matrix_gets_no_broadcast_advice(ip):
    oom = _failing(ip, "w = torch.rand(64)", "D = torch.diag(w)\nY = D.sum()", A.diag_embed, 64 * 64 * 4)
    _no_fix(oom, "builds a (")
    oom = _failing(ip, "M = torch.rand(64, 64)\nX = torch.rand(64, 8)", "Y = torch.diag(M) @ X", A.mm, 8 * 4)
    _no_fix(oom, "builds a (")


# -- SVD / QR -----------------------------------------------------------------------------------------------------------
def test_a_full_svd_of_a_tall_matrix_gets_full_matrices_false(ip):
    m, n = 512, 16
    oom = _failing(ip, f"A = torch.randn({m}, {n})\nrank = 4", "U, S, Vh = torch.linalg.svd(A)\nU_k = U[:, :rank]",
                   A._linalg_svd, m * m * 4)
    full, red = (m * m + n * n) * 4, (m * n + n * n) * 4
    f = _fix(oom, "computes the full SVD")
    assert f.what.startswith(f"`torch.linalg.svd(A)` computes the full SVD of a ({m}, {n}) matrix: U is ({m}, {m}) "
                             f"and Vh ({n}, {n}), {fb(full)} together; with full_matrices=False U is ({m}, {n}) and "
                             f"Vh ({n}, {n}), {fb(red)}, {fb(full - red)} less")
    assert f.code == "U, S, Vh = torch.linalg.svd(A, full_matrices=False)"
    g, a = _ns(ip, f.code), ip.user_ns["A"]
    torch.testing.assert_close(g["U"] @ torch.diag(g["S"]) @ g["Vh"], a, rtol=1e-4, atol=1e-4)
    assert g["U"].shape == (m, n)


def test_a_complete_qr_and_torch_svd_some_false_get_the_reduced_forms(ip):
    m, n = 300, 20
    oom = _failing(ip, f"A = torch.randn({m}, {n})", "Q, R = torch.linalg.qr(A, mode='complete')", A.linalg_qr,
                   m * m * 4)
    f = _fix(oom, "complete QR")
    assert f"Q is ({m}, {m}) and R ({m}, {n}), {fb((m * m + m * n) * 4)} together; with mode='reduced' Q is " \
           f"({m}, {n}) and R ({n}, {n}), {fb((m * n + n * n) * 4)}" in f.what
    g = _ns(ip, f.code)
    torch.testing.assert_close(g["Q"] @ g["R"], ip.user_ns["A"], rtol=1e-4, atol=1e-4)
    oom = _failing(ip, f"A = torch.randn({n}, {m})", "U, S, V = torch.svd(A, some=False)", A._linalg_svd, m * m * 4)
    f = _fix(oom, "computes the full SVD")
    assert f.code == "U, S, V = torch.svd(A, some=True)"
    assert f"U is ({n}, {n}) and V ({m}, {m})" in f.what and f"U is ({n}, {n}) and V ({m}, {n})" in f.what


def test_an_svd_of_a_square_or_already_reduced_matrix_gets_no_advice(ip):
    oom = _failing(ip, "A = torch.randn(64, 64)", "U, S, Vh = torch.linalg.svd(A)", A._linalg_svd, 64 * 64 * 4)
    _no_fix(oom, "full SVD")
    oom = _failing(ip, "A = torch.randn(64, 8)", "U, S, Vh = torch.linalg.svd(A, full_matrices=False)",
                   A._linalg_svd, 64 * 8 * 4)
    _no_fix(oom, "full SVD")
    oom = _failing(ip, "A = torch.randn(64, 8)", "U, S, V = torch.svd(A)", A._linalg_svd, 64 * 8 * 4)
    _no_fix(oom, "full SVD")


# -- an unintended broadcast --------------------------------------------------------------------------------------------
def test_an_unintended_broadcast_of_different_ranks_gets_the_same_shape(ip):
    n = 8000  # a real failure is too slow here: (n, n, 1) float32 is 244 MiB; the mode fails it
    oom = _failing(ip, f"a = torch.randn({n}, 1, 1)\nb = torch.randn({n}, 1)", "c = a + b", A.add, n * n * 4)
    f = _fix(oom, "broadcasting aligns shapes")
    assert f.what == (f"broadcasting aligns shapes from the right: a ({n}, 1, 1) + b ({n}, 1) puts a's dim 0 ({n}) and "
                      f"b's dim 0 ({n}) on different axes of the result, ({n}, {n}, 1) ({fb(n * n * 4)}): each of "
                      f"the {n} of one meets each of the {n} of the other; where a's and b's elements go together one "
                      f"by one, give both the same shape: `a + b.reshape_as(a)` is ({n}, 1, 1), {fb(n * 4)}")
    g = _ns(ip, f.code)
    torch.testing.assert_close(g["c"], ip.user_ns["a"] + ip.user_ns["b"].view(n, 1, 1))


@pytest.mark.parametrize("setup, cell", [
    ("a = torch.randn(4000, 1)\nb = torch.randn(1, 4000)", "c = a - b"),          # the same rank: an outer difference
    ("a = torch.randn(4000)\nb = torch.randn(4000)", "c = a[:, None] - b"),     # shaped on purpose
    ("a = torch.randn(4000, 1)\nb = torch.randn(4000)", "c = a.unsqueeze(0) * b"),
])
def test_a_broadcast_written_on_purpose_gets_no_same_shape_advice(ip, setup, cell):
    oom = _failing(ip, setup, cell, A.sub if "-" in cell else A.mul, 4000 * 4000 * 4)
    _no_fix(oom, "broadcasting aligns shapes")


# -- an output sized by a value read from a tensor ----------------------------------------------------------------------
def test_zeros_sized_by_a_corrupt_index_gets_its_largest_and_distinct_values(ip):
    setup = ("torch.manual_seed(0)\nfeats = torch.randn(2000, 8)\nvoxel_id = torch.randint(0, 50, (2000,))\n"
             "voxel_id[123] = 100_000")
    cell = "pooled = torch.zeros(int(voxel_id.max()) + 1, 8).index_add_(0, voxel_id, feats)"
    oom = _failing(ip, setup, cell, A.zeros, 100_001 * 8 * 4)
    d = int(torch.unique(ip.user_ns["voxel_id"]).numel())
    second = int(torch.unique(ip.user_ns["voxel_id"])[-2])
    f = _fix(oom, "is read from voxel_id's values")
    assert f.what.startswith(f"the size `int(voxel_id.max()) + 1` is read from voxel_id's values: its largest is "
                             f"100,000, so the result has 100,001 rows of 32 B ({fb(100_001 * 32)}); voxel_id holds "
                             f"{d:,} distinct values, the largest 100,000 and the next {second:,}: check voxel_id for "
                             "a value out of range")
    assert f.what.endswith(f"number them 0..{d - 1} with torch.unique(..., return_inverse=True): {d:,} rows, "
                           f"{fb(d * 32)}")
    g = _ns(ip, f.code)
    vid, feats = ip.user_ns["voxel_id"], ip.user_ns["feats"]
    want = torch.zeros(int(vid.max()) + 1, 8).index_add_(0, vid, feats)
    torch.testing.assert_close(g["pooled"], want[g["keys"]])


def test_bincount_over_a_huge_key_range_gets_unique_with_counts(ip):
    setup = "torch.manual_seed(0)\nx = torch.randint(0, 200, (2000,))\ny = torch.randint(0, 200, (2000,))"
    cell = "keys = (x + y) * (x + y + 1) // 2 + y\ncounts = torch.bincount(keys)\njoint = counts[counts > 0]"
    x, y = (torch.manual_seed(0), torch.randint(0, 200, (2000,)), torch.randint(0, 200, (2000,)))[1:]
    keys = (x + y) * (x + y + 1) // 2 + y
    mx, d = int(keys.max()), int(torch.unique(keys).numel())
    oom = _failing(ip, setup, cell, A.bincount, (mx + 1) * 8)
    f = _fix(oom, "torch.bincount keeps")
    assert f.what.startswith(f"torch.bincount keeps one int64 count for every value from 0 to keys's largest, {mx:,}: "
                             f"({mx + 1:,},) int64 = {fb((mx + 1) * 8)} for 2,000 values; keys holds {d:,} distinct")
    assert f"counts only the values that occur: {d:,} values and {d:,} counts, {fb(d * 16)}" in f.what
    g = _ns(ip, f.code, keys=keys)
    assert torch.equal(g["counts"], torch.bincount(keys)[torch.bincount(keys) > 0])


def test_a_size_not_read_from_values_or_a_dense_range_gets_no_unique_advice(ip):
    oom = _failing(ip, "n = 1000", "z = torch.zeros(n, 64)", A.zeros, 1000 * 64 * 4)
    _no_fix(oom, "is read from")
    oom = _failing(ip, "keys = torch.arange(5000)", "counts = torch.bincount(keys)", A.bincount, 5000 * 8)
    _no_fix(oom, "return_counts")  # every value occurs: bincount is the compact form


# -- boolean-mask indexing ------------------------------------------------------------------------------------------------
def test_a_masked_selection_that_is_averaged_gets_a_masked_reduction(ip):
    setup = ("torch.manual_seed(0)\nshape = (16, 32, 32)\nvoxel_loss = torch.rand(shape)\n"
             "mask = torch.rand(shape) > 0.05")
    oom = _failing(ip, setup, "loss = voxel_loss[mask].mean()", A.index, 1000)
    m = ip.user_ns["mask"]
    k = int(m.sum())
    f = _fix(oom, "first finds the selected positions with nonzero")
    assert f.what == (f"`voxel_loss[mask]` first finds the selected positions with nonzero: {k:,} of {m.numel():,} "
                      f"are True, so nonzero returns a ({k}, 3) int64 tensor ({fb(k * 24)}) and the selection is "
                      f"another {fb(k * 4)}; the mean needs neither: `torch.where(mask, voxel_loss, 0).sum() / "
                      f"mask.sum()` writes one tensor of voxel_loss's shape ({fb(m.numel() * 4)}) and reduces it")
    torch.testing.assert_close(_ns(ip, f.code)["loss"], ip.user_ns["voxel_loss"][m].mean())


def test_a_masked_selection_used_whole_or_sparse_gets_no_masked_reduction(ip):
    setup = "torch.manual_seed(0)\nx = torch.rand(16, 32, 32)\nmask = torch.rand(16, 32, 32) > 0.05"
    oom = _failing(ip, setup, "sel = x[mask]\ntop = sel.sort().values", A.index, 1000)
    _no_fix(oom, "nonzero")
    oom = _failing(ip, "x = torch.rand(16, 32, 32)\nmask = torch.rand(16, 32, 32) > 0.99", "s = x[mask].sum()",
                   A.index, 1000)
    _no_fix(oom, "nonzero")  # 1 % selected: the indices are smaller than a full-size tensor


# -- interpolate -------------------------------------------------------------------------------------------------------------
def test_logits_upsampled_then_argmaxed_get_channel_chunks_with_the_same_argmax(ip):
    setup = ("import torch.nn.functional as F\ntorch.manual_seed(0)\nseg_logit = torch.randn(1, 32, 16, 24)\n"
             "ori_shape = (64, 96)")
    cell = ('with torch.no_grad():\n    up = F.interpolate(seg_logit, size=ori_shape, mode="bilinear", '
            'align_corners=False)\n    pred = up.argmax(1)')
    full = 32 * 64 * 96 * 4
    oom = _failing(ip, setup, cell, A.upsample_bilinear2d, full)
    f = _fix(oom, "F.interpolate resizes all 32 channels")
    assert f.what.startswith(f"F.interpolate resizes all 32 channels of seg_logit to (1, 32, 64, 96) ({fb(full)}), "
                             f"which the argmax over dim 1 then reduces to one index per position ({fb(64 * 96 * 8)} "
                             f"int64): each channel is resized on its own, so 4 at a time with a running maximum gives "
                             f"the same argmax, the largest tensor then {fb(full // 8)}")
    g = _ns(ip, f.code)
    assert torch.equal(g["pred"], _ns(ip, cell.replace("with torch.no_grad():\n    ", "").replace("\n    ", "\n"))
                       ["pred"])


def test_upsampled_logits_of_few_channels_not_reduced_get_no_chunk_advice(ip):
    setup = "import torch.nn.functional as F\nx = torch.randn(1, 3, 16, 24)"
    oom = _failing(ip, setup, "up = F.interpolate(x, scale_factor=4, mode='bilinear')\ny = up * 2",
                   A.upsample_bilinear2d, 3 * 64 * 96 * 4)
    _no_fix(oom, "F.interpolate resizes")


# -- stft -----------------------------------------------------------------------------------------------------------------------
def test_the_stft_of_a_whole_recording_gets_chunks_of_frames_with_the_same_spectrogram(ip):
    setup = "torch.manual_seed(0)\naudio = torch.randn(16000)\nwindow = torch.hann_window(400)"
    cell = "spec = torch.stft(audio, n_fft=400, hop_length=160, window=window, return_complex=True)"
    frames, bins = 1 + 16000 // 160, 201
    oom = _failing(ip, setup, cell, A._fft_r2c, frames * bins * 8)
    f = _fix(oom, "torch.stft of all")
    per = -(-frames // 8)
    assert f.what.startswith(f"torch.stft of all 16,000 samples of audio makes {frames:,} frames of 400 samples (hop "
                             f"160) at once: the spectrogram alone is {frames:,} × 201 bins × 8 B = "
                             f"{fb(frames * bins * 8)} (complex), and the windowed frames inside it "
                             f"{fb(frames * 400 * 4)}; computed {per:,} frames at a time")
    g = _ns(ip, f.code)
    torch.testing.assert_close(g["spec"], _ns(ip, cell)["spec"], rtol=1e-4, atol=1e-4)


def test_the_stft_of_a_short_signal_gets_no_chunks(ip):
    oom = _failing(ip, "audio = torch.randn(4000)", "spec = torch.stft(audio, n_fft=400, return_complex=True)",
                   A._fft_r2c, 41 * 201 * 8)
    _no_fix(oom, "torch.stft of all")


# -- widening a data set -----------------------------------------------------------------------------------------------------
def test_a_whole_uint8_data_set_made_float_gets_uint8_and_a_float_batch(ip):
    setup = ("import numpy as np\nrng = np.random.default_rng(0)\n"
             "frames = [rng.integers(0, 256, (8, 8), dtype=np.uint8) for _ in range(500)]")
    cell = ("episodes = torch.from_numpy(np.stack(frames)).float()\nidx = torch.randint(0, len(episodes), (32,))\n"
            "batch = episodes[idx] / 255.0")
    oom = _failing(ip, setup, cell, A._to_copy, 500 * 64 * 4)
    f = _fix(oom, "makes a float32 copy")
    assert f.what == (f"`.float()` makes a float32 copy of all 32,000 elements of torch.from_numpy(np.stack(frames)) "
                      f"((500, 8, 8) uint8, {fb(32000)}): {fb(128000)}, 4× the source; keep the data uint8 and convert "
                      f"each batch where it is used (`episodes[idx].float()`)")
    assert f.code == (f"episodes = torch.from_numpy(np.stack(frames))  # uint8: {fb(32000)}\n"
                      "batch = episodes[idx].float() / 255.0")
    g = _ns(ip, f.code + "\n", np=np, idx=torch.arange(32))
    want = torch.from_numpy(np.stack(ip.user_ns["frames"])).float()[torch.arange(32)] / 255.0
    torch.testing.assert_close(g["batch"], want)


def test_a_float_per_step_inside_a_loop_gets_no_widening_advice(ip):
    setup = "data = torch.randint(0, 255, (500, 64), dtype=torch.uint8)"
    oom = _failing(ip, setup, "for i in range(0, 500, 100):\n    b = data[i:i + 100].float()", A._to_copy, 100 * 64 * 4)
    _no_fix(oom, "makes a float32 copy")


def test_a_float64_numpy_array_made_float32_gets_float32_at_the_source(ip):
    setup = "import numpy as np\nrng = np.random.default_rng(0)"
    cell = ("obs = rng.standard_normal((256, 512))\n"
            "obs_t = torch.as_tensor(obs, dtype=torch.float32)")
    oom = _failing(ip, setup, cell, A._to_copy, 256 * 512 * 4)
    f = _fix(oom, "float64 NumPy array")
    n = 256 * 512
    assert f.what.startswith(f"obs is a float64 NumPy array ((256, 512), {fb(n * 8)}), NumPy's default; converting it "
                             f"to float32 writes a second one of {fb(n * 4)} beside it ({fb(n * 12)} together); made "
                             f"float32 where it is made, torch.from_numpy(obs) shares its memory: {fb(n * 4)} in all")
    assert f.code == ("obs = rng.standard_normal((256, 512), dtype=np.float32)\nobs_t = torch.from_numpy(obs)")
    g = _ns(ip, f.code, np=np, rng=np.random.default_rng(0))
    assert g["obs_t"].dtype == torch.float32 and g["obs_t"].shape == (256, 512)
    assert np.shares_memory(g["obs_t"].numpy(), g["obs"])


def test_a_float32_numpy_array_gets_no_float32_advice(ip):
    run(ip, "import numpy as np")
    ip.user_ns["obs"] = np.zeros((64, 64), dtype=np.float32)
    oom = _failing(ip, "pass", "t = torch.as_tensor(obs, dtype=torch.float32) * 2", A.mul, 64 * 64 * 4)
    _no_fix(oom, "float64 NumPy")


# -- deepcopy --------------------------------------------------------------------------------------------------------------------
def test_deepcopy_of_a_model_for_evaluation_names_the_users_call_and_evaluating_the_model(ip):
    setup = ("import copy\nimport torch.nn as nn\nmodel = nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)])\n"
             "x = torch.randn(8, 64)")
    cell = "eval_model = copy.deepcopy(model).eval()\nwith torch.no_grad():\n    out = eval_model(x)"
    oom = _failing(ip, setup, cell, A.clone, 64 * 64 * 4, skip=2)
    assert oom.state.context.call.startswith("`copy.deepcopy(model)` asked for")
    held = 4 * (64 * 64 + 64) * 4
    f = _fix(oom, "copy.deepcopy(model) copies")
    assert f.what == (f"copy.deepcopy(model) copies every tensor of model, among them its parameters and buffers "
                      f"({fb(held)}), into new memory; the copy eval_model is only put in eval mode and called: "
                      "evaluate model itself instead, model.eval() under torch.no_grad() and model.train() after (0 B "
                      "of weights more)")


def test_deepcopy_of_a_model_that_is_trained_after_or_of_a_tensor_dict_gets_no_evaluate_instead(ip):
    setup = ("import copy\nimport torch.nn as nn\nmodel = nn.Linear(64, 64)")
    cell = ("ema = copy.deepcopy(model)\nfor p, q in zip(ema.parameters(), model.parameters()):\n"
            "    p.data.mul_(0.9).add_(q.data, alpha=0.1)")
    oom = _failing(ip, setup, cell, A.clone, 64 * 64 * 4)
    f = _fix(oom, "copy.deepcopy(model) copies")
    assert "only put in eval mode" not in f.what and "where the copy only serves to evaluate" in f.what
    oom = _failing(ip, "import copy\nd = {'w': torch.randn(64, 64)}", "e = copy.deepcopy(d)", A.empty, 64 * 64 * 4)
    _no_fix(oom, "deepcopy")


# -- JSON of .tolist() -------------------------------------------------------------------------------------------------------
def test_json_of_tolist_gets_the_raw_bytes(ip, monkeypatch):
    import json

    import vramnb
    from tests.test_oom_call_reading import _raiser

    run(ip, "import json\nembeddings = torch.randn(200, 16)")
    monkeypatch.setattr(json, "dumps", _raiser())
    res, _ = run(ip, '%%vram -d cpu\npayload = json.dumps({"embeddings": embeddings.tolist()})')
    assert isinstance(res.error_in_exec, MemoryError)
    note = vramnb.history()[-1].notes[0]
    nb = 200 * 16 * 4
    assert "it failed in `json.dumps({\"embeddings\": embeddings.tolist()})` (line 2): embeddings.tolist() of a " \
           "(200, 16) float32 tensor" in note
    assert note.endswith(f"; `json.dumps({{\"embeddings\": embeddings.tolist()}})` then works on all of them: save or "
                         f"send the raw bytes instead: torch.save(embeddings, path) (the {fb(nb)} of its storage and a "
                         f"header), numpy.save(path, embeddings.numpy()), or embeddings.numpy().tobytes() ({fb(nb)}; "
                         f"with the shape (200, 16) and dtype float32 beside it; base64 for JSON text: "
                         f"{fb(4 * math.ceil(nb / 3))})")


# -- attacks: the same families where a part of the evidence is missing or differs ------------------------------------------
def test_upsampled_logits_also_used_by_a_loss_get_only_the_conditional(ip):
    setup = ("import torch.nn.functional as F\nseg_logit = torch.randn(1, 32, 16, 24)\n"
             "target = torch.randint(0, 32, (1, 64, 96))")
    cell = ("up = F.interpolate(seg_logit, size=(64, 96), mode='bilinear')\npred = up.argmax(1)\n"
            "loss = F.cross_entropy(up, target)")
    oom = _failing(ip, setup, cell, A.upsample_bilinear2d, 32 * 64 * 96 * 4)
    f = _fix(oom, "F.interpolate resizes all 32 channels")
    assert "where the result only feeds a reduction over the channels" in f.what and f.code == ""


def test_a_row_mask_on_a_matrix_summed_gets_the_broadcast_mask(ip):
    setup = "torch.manual_seed(0)\nx = torch.randn(4096, 8)\nkeep = torch.rand(4096) > 0.05"
    oom = _failing(ip, setup, "total = x[keep].sum()", A.index, 1000)
    k = int(ip.user_ns["keep"].sum())
    f = _fix(oom, "first finds the selected positions")
    assert f"nonzero returns a ({k}, 1) int64 tensor ({fb(k * 8)}) and the selection is another {fb(k * 32)}" in f.what
    assert f.code == "total = torch.where(keep[..., None], x, 0).sum()"
    torch.testing.assert_close(_ns(ip, f.code)["total"], ip.user_ns["x"][ip.user_ns["keep"]].sum())


def test_a_float_of_half_logits_not_indexed_later_gets_no_data_set_advice(ip):
    setup = "logits = torch.randn(64, 1000).half()"
    oom = _failing(ip, setup, "probs = logits.float().softmax(-1)", A._to_copy, 64 * 1000 * 4)
    _no_fix(oom, "makes a float32 copy")


def test_a_masked_selection_with_nan_outside_the_mask_keeps_the_same_sum(ip):
    setup = ("x = torch.rand(64, 64)\nmask = torch.rand(64, 64) > 0.05\nx[~mask] = float('nan')")
    oom = _failing(ip, setup, "s = x[mask].sum()", A.index, 1000)
    f = _fix(oom, "first finds the selected positions")
    torch.testing.assert_close(_ns(ip, f.code)["s"], ip.user_ns["x"][ip.user_ns["mask"]].sum())


def test_a_pyg_scatter_without_dim_size_gets_the_index_range_and_dim_size(ip):
    pytest.importorskip("torch_geometric")
    setup = ("from torch_geometric.utils import scatter\ntorch.manual_seed(0)\nsrc = torch.randn(1000, 16)\n"
             "index = torch.randint(0, 40, (1000,))\nindex[7] = 50_000")
    oom = _failing(ip, setup, "pooled = scatter(src, index, dim=0, reduce='sum')", A.new_zeros, 50_001 * 64)
    d = int(torch.unique(ip.user_ns["index"]).numel())
    f = _fix(oom, "without dim_size")
    assert f.what.startswith(f"without dim_size, the output's size along dim is index.max() + 1 = 50,001 "
                             f"({fb(50_001 * 64)}, 64 B a row); index holds {d:,} distinct values, the largest 50,000 "
                             "and the next 39: check index for a value out of range; pass dim_size=")
    assert f.code == "pooled = scatter(src, index, dim=0, reduce='sum', dim_size=...)"


def test_tensor_scatter_add_with_its_own_output_gets_no_dim_size(ip):
    setup = "out = torch.zeros(100, 16)\nsrc = torch.randn(1000, 16)\nidx = torch.randint(0, 100, (1000, 16))"
    oom = _failing(ip, setup, "res = out.scatter_add(0, idx, src)", A.scatter_add, 100 * 16 * 4)
    _no_fix(oom, "dim_size")


# -- embedding then a sum over the bag: embedding_bag (validation-10, pytorch#1803) ------------------------------------
@pytest.mark.parametrize("reduce, mode", [("emb(bags).sum(1)", "sum"), ("emb(bags).mean(dim=1)", "mean")])
def test_embeddings_summed_over_the_bag_get_embedding_bag(ip, reduce, mode):
    setup = "emb = torch.nn.Embedding(50, 16)\nbags = torch.randint(0, 50, (32, 12))"
    oom = _failing(ip, setup, f"doc = {reduce}", A.embedding, 32 * 12 * 16 * 4)
    f = _fix(oom, "makes every embedding of every bag first")
    assert f.what.startswith(f"`{reduce}` makes every embedding of every bag first, (32, 12, 16) float32 "
                             f"({fb(32 * 12 * 16 * 4)}), only to {mode} them over the bag")
    assert f.code == f"doc = torch.nn.functional.embedding_bag(bags, emb.weight, mode='{mode}')"
    torch.testing.assert_close(_ns(ip, f.code)["doc"], _ns(ip, f"doc = {reduce}")["doc"])


def test_embeddings_kept_whole_or_reduced_over_another_dim_get_no_embedding_bag(ip):
    setup = "emb = torch.nn.Embedding(50, 16)\nbags = torch.randint(0, 50, (32, 12))"
    oom = _failing(ip, setup, "doc = emb(bags).sum(2)", A.embedding, 32 * 12 * 16 * 4)
    _no_fix(oom, "embedding_bag")
    oom = _failing(ip, setup, "doc = emb(bags)", A.embedding, 32 * 12 * 16 * 4)
    _no_fix(oom, "embedding_bag")


# -- one-hot rows only multiplied: index instead (validation-10 nri_one_hot_relation_matrices_oom,
#    one_hot_inputs_into_linear_wide_model_oom) -----------------------------------------------------------------------
def test_one_hot_rows_from_eye_then_matmul_get_index_select(ip):
    setup = "N, H = 12, 5\nx = torch.randn(2, N, H)\nsend = torch.randint(0, N, (40,))"
    cell = "rel_send = torch.eye(N)[send]\nsenders = torch.matmul(rel_send, x)"
    oom = _failing(ip, setup, cell, A.index, 40 * 12 * 4)
    f = _fix(oom, "makes a one-hot row for each of the 40 indices of send")
    assert f.what.startswith(f"`torch.eye(N)[send]` makes a one-hot row for each of the 40 indices of send, (40, 12) "
                             f"({fb(40 * 12 * 4)}), and `torch.matmul(rel_send, x)` later only picks rows of x with it")
    assert f.code == "senders = x.index_select(-2, send)"
    torch.testing.assert_close(_ns(ip, f.code)["senders"], _ns(ip, cell)["senders"])


def test_one_hot_columns_scattered_into_zeros_then_a_linear_get_the_weight_lookup(ip):
    setup = "n_ids, B = 30, 8\nwide = torch.nn.Linear(n_ids, 2)\ny = torch.rand(B, 2)\n" \
            "X_idx = torch.stack([torch.randperm(n_ids)[:4] for _ in range(B)])"  # distinct ids per row
    cell = "X = torch.zeros(B, n_ids)\nX.scatter_(1, X_idx, 1.0)\nloss = (wide(X) - y).pow(2).mean()"
    oom = _failing(ip, setup, cell, A.zeros, 8 * 30 * 4)
    f = _fix(oom, "with ones at X_idx's 4 columns per row (scatter_)")
    assert f.code == "loss = ((wide.weight.T[X_idx].sum(1) + wide.bias) - y).pow(2).mean()"
    torch.testing.assert_close(_ns(ip, f.code)["loss"], _ns(ip, cell)["loss"])


def test_one_hot_rows_not_multiplied_get_no_lookup(ip):
    setup = "N = 12\nsend = torch.randint(0, N, (40,))"
    oom = _failing(ip, setup, "rel_send = torch.eye(N)[send]\ncounts = rel_send.sum(0)", A.index, 40 * 12 * 4)
    _no_fix(oom, "one-hot row")


# -- a diagonal covariance given to MultivariateNormal (validation-10 mvn_diagonal_covariance_dense_oom) ------------------
def test_a_diagonal_covariance_gets_independent_normals(ip):
    setup = "from torch.distributions import MultivariateNormal\nmu = torch.randn(6, 16)\nvar = torch.rand(6, 16) + 0.1"
    cell = "cov = torch.diag_embed(var)\ndist = MultivariateNormal(mu, covariance_matrix=cov)\nlp = dist.log_prob(mu + 0.3)"
    oom = _failing(ip, setup, cell, A.linalg_cholesky_ex, 6 * 16 * 16 * 4)
    f = _fix(oom, "is diagonal (`var` on the diagonal, made with diag_embed)")
    new = "torch.distributions.Independent(torch.distributions.Normal(mu, var.sqrt()), 1)"
    assert f.code == f"dist = {new}"
    # the same distribution: the log-density agrees
    torch.testing.assert_close(_ns(ip, f.code + "\nlp = dist.log_prob(mu + 0.3)")["lp"], _ns(ip, cell)["lp"])
    # a full covariance: nothing said
    oom = _failing(ip, "from torch.distributions import MultivariateNormal\nmu = torch.randn(6, 16)\n"
                       "a = torch.randn(6, 16, 16)", cell.replace("torch.diag_embed(var)", "a @ a.transpose(-1, -2) + "
                                                                  "torch.eye(16)"),
                   A.linalg_cholesky_ex, 6 * 16 * 16 * 4)
    _no_fix(oom, "is diagonal")


# -- a whole-vocabulary log_softmax read at one entry per row (validation-10 bf16_logits_upcast_to_fp32_for_loss_oom) --
def test_a_log_softmax_read_at_one_entry_per_row_gets_chunks(ip):
    setup = "logits = torch.randn(64, 100, dtype=torch.bfloat16)\ntokens = torch.randint(0, 100, (64,))"
    cell = ("logp = torch.log_softmax(logits.float(), dim=-1)\nlog_prob = logp.gather(-1, tokens[:, None]).squeeze(-1)\n"
            "loss = -log_prob.mean()")
    oom = _failing(ip, setup, cell, A._log_softmax, 64 * 100 * 4)
    f = _fix(oom, "normalises all 64 rows over all 100 columns at once, on a float32 copy of logits")
    assert f.code == ("log_prob = torch.cat([torch.log_softmax(c.float(), dim=-1).gather(-1, t[:, None]).squeeze(-1) "
                      "for c, t in zip(logits.split(4), tokens.split(4))])")
    torch.testing.assert_close(_ns(ip, f.code)["log_prob"], _ns(ip, cell)["log_prob"])
    # with a gradient to keep, each chunk's softmax is saved for backward: nothing said
    oom = _failing(ip, setup + "\nlogits.requires_grad_(True)", cell, A._log_softmax, 64 * 100 * 4)
    _no_fix(oom, "rows can go")


# -- message passing edge by edge: a sparse adjacency product (validation-10 gcn_messages_gathered_per_edge_oom) -----
def test_per_edge_messages_summed_into_nodes_get_a_sparse_product(ip):
    setup = ("N, E = 20, 90\nh = torch.randn(N, 6)\nedge_index = torch.randint(0, N, (2, E))\n"
             "norm = torch.rand(E)")
    cell = ("x_j = h[edge_index[0]]\nmsg = norm.view(-1, 1) * x_j\n"
            "out = torch.zeros_like(h).index_add_(0, edge_index[1], msg)")
    oom = _failing(ip, setup, cell, A.mul, 90 * 6 * 4)
    f = _fix(oom, "copies a row of h for each of the 90 edges")
    assert f.code == ("adj = torch.sparse_coo_tensor(torch.stack([edge_index[1], edge_index[0]]), norm, (20, 20))  "
                      "# adj[dst, src] = weight\nout = torch.sparse.mm(adj, h)")
    torch.testing.assert_close(_ns(ip, f.code)["out"], _ns(ip, cell)["out"])
    # the rows gathered but not summed into nodes: nothing said
    oom = _failing(ip, setup, "x_j = h[edge_index[0]]\nmsg = norm.view(-1, 1) * x_j\ntotal = msg.sum()", A.mul, 90 * 6 * 4)
    _no_fix(oom, "sparse adjacency")


# -- a model run on k stacked copies of its batch (validation-10 mc_dropout_passes_batched_by_repeat_oom) -------------
def test_a_model_on_a_repeated_batch_with_gradients_off_gets_one_pass_at_a_time(ip):
    setup = "model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3)).eval()\n" \
            "x = torch.randn(5, 8)\nnum_passes = 4"
    cell = "with torch.no_grad():\n    out = model(x.repeat(num_passes, 1)).view(num_passes, 5, 3)"
    oom = _failing(ip, setup, cell, A.relu, 4 * 5 * 32 * 4)
    f = _fix(oom, "runs model once on 4 copies of x stacked into one batch of 20")
    assert f.code == "out = torch.cat([model(x) for _ in range(num_passes)]).view(num_passes, 5, 3)"
    with torch.no_grad():
        torch.testing.assert_close(_ns(ip, f.code)["out"], _ns(ip, cell)["out"])
    # with gradients on, every pass's graph is kept until backward: nothing said
    oom = _failing(ip, setup, "out = model(x.repeat(num_passes, 1))", A.relu, 4 * 5 * 32 * 4)
    _no_fix(oom, "stacked into one batch")


# -- a data set padded up front to its longest row (validation-10 dataset_padded_to_longest_sample_oom) ---------------
def test_rows_padded_up_front_get_a_collate_fn_that_pads_each_batch(ip):
    setup = ("import random\nrandom.seed(0)\nlens = [random.randint(3, 12) for _ in range(63)] + [200]\n"
             "padded = {'ids': [[random.randint(1, 99) for _ in range(L)] + [0] * (200 - L) for L in lens]}\n"
             "NAMES = ['ids']")
    cell = "ts = [torch.tensor(padded[name]) for name in NAMES]"
    oom = _failing(ip, setup, cell, A.lift_fresh, 64 * 200 * 8)
    f = _fix(oom, "padded[name] is 64 rows all 200 long")
    assert "of its values are padding" in f.what and "pad each batch to its own longest in a collate_fn" in f.what
    ns = _ns(ip, f.code)
    batch = ns["collate"]([[5, 6, 7], [8]])
    assert batch.tolist() == [[5, 6, 7], [8, 0, 0]]
    # rows of real values (no long trailing run): nothing said
    oom = _failing(ip, "rows = [[i % 7 + 1 for i in range(200)] for _ in range(64)]", "t = torch.tensor(rows)",
                   A.lift_fresh, 64 * 200 * 8)
    _no_fix(oom, "padding")


# -- all pairs of rows side by side, then multiplied by a vector (validation-10 gat_dense_all_pairs_attention_input_oom)
def test_all_pairs_of_rows_concatenated_get_the_split_score(ip):
    setup = ("N, F_out = 6, 3\nWh = torch.randn(N, F_out)\na = torch.randn(2 * F_out, 1)\n"
             "def pairs(Wh):\n    chunks = Wh.repeat_interleave(N, dim=0)\n    alternating = Wh.repeat(N, 1)\n"
             "    both = torch.cat([chunks, alternating], dim=1)\n    return both.view(N, N, 2 * F_out)")
    cell = "e = torch.matmul(pairs(Wh), a).squeeze(2)"
    oom = _failing(ip, setup, cell, A.cat, 36 * 6 * 4)
    f = _fix(oom, "puts every pair of rows of Wh side by side, (36, 6)")
    assert f.code.startswith("e = Wh @ a[:3] + (Wh @ a[3:]).T")
    torch.testing.assert_close(_ns(ip, f.code)["e"], _ns(ip, cell)["e"])
