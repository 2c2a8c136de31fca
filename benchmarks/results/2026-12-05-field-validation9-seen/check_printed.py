"""Run the code vramnb printed as a fix (validation-8 and validation-9, 2026-12-05 'seen' runs) in plain Python.

vramnb is not imported. Each out-of-memory case: setup, gc, 64 MiB ballast held, RLIMIT_AS = VmSize + the case's
headroom, then the printed fix (must fit). Uses validation-9's calibrate_plain.py (same procedure), with the cells
below in place of its FIXED cells. Usage: check_printed.py [CASE ...] (default: all below)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-12-05-field-validation9-before"))
import calibrate_plain  # noqa: E402

PRINTED = {
    # validation-8
    "dense_adjacency_for_node_degrees_oom": """
from torch_geometric.utils import degree
deg = degree(edge_index[0], num_nodes)
""",
    "lm_head_logits_for_every_prompt_position_oom": """
with torch.no_grad():
    logits = lm_head(hidden[:, -1:])
    next_token = logits[:, -1, :].argmax(-1)
""",
    "multihead_attention_need_weights_default_oom": """
out, _ = attn(x, x, x, need_weights=False)
loss = out.pow(2).mean()
loss.backward()
""",
    "deepcopy_of_row_views_copies_whole_storage_oom": """
top = (embeddings @ query).topk(8).indices.tolist()
prototypes = [copy.deepcopy(embeddings[i].clone()) for i in top]
""",
    "mse_target_shape_broadcast_in_training_step_oom": """
pred = model(X)
loss = F.mse_loss(pred.squeeze(-1), y)
opt.zero_grad()
loss.backward()
opt.step()
""",
    "meshgrid_dense_coordinates_oom": """
xx, yy, zz = np.meshgrid(x, x, x, indexing='ij', sparse=True)
sdf = torch.from_numpy(np.sqrt(xx**2 + yy**2 + zz**2) - 0.5)
""",
    "pickle_of_slice_serialises_whole_storage_oom": """
payloads = [pickle.dumps(dataset[i * 16:(i + 1) * 16].clone()) for i in range(4)]
""",
    "grpo_logits_for_prompt_tokens_oom": """
logits = model(prompt_completion_ids, num_logits_to_keep=512 - prompt_length + 1)[:, :-1, :]
logps = logits.log_softmax(-1).gather(-1, prompt_completion_ids[:, prompt_length:, None]).squeeze(-1)
loss = -logps.mean()
loss.backward()
""",
    "dense_numpy_adjacency_for_graph_embedding_oom": """
X = torch.sparse_coo_tensor(torch.from_numpy(edges.T), torch.from_numpy(weights), (n, n)).coalesce()
rows = X.index_select(0, torch.arange(256)).to_dense()      # a batch of rows densified
""",
    "corrcoef_of_stacked_arrays_for_one_row_oom": """
xs = (x_train - x_train.mean(0)) / x_train.std(0)
ys = (y_unit - y_unit.mean()) / y_unit.std()
corr = ys @ xs / len(ys)
""",
    # validation-9
    "load_state_dict_into_initialised_model_oom": """
with torch.device('meta'):
    model = LM()
state = torch.load(CKPT, weights_only=True, mmap=True)
model.load_state_dict(state, assign=True)
""",
    "where_with_zeros_like_operand_oom": """
with torch.no_grad():
    valid_token_mask = torch.arange(num_tokens)[:, None] < num_valid_tokens
    valid_output = down_out_list.masked_fill(~valid_token_mask, 0)
    final_hidden_states.index_add_(0, sorted_token_indices, valid_output)
""",
    "full_sort_for_top_values_oom": """
sorted_scores, order = scores.topk(200, largest=True)
top_scores, top_idx = sorted_scores[:200], order[:200]
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
    grads = torch.autograd.grad(loss, fast, create_graph=False)
    fast = [w - 0.1 * g for w, g in zip(fast, grads)]
meta_loss = F.cross_entropy(net(query_x, fast), query_y)
meta_opt.zero_grad()
meta_loss.backward()
meta_opt.step()
""",
}

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        calibrate_plain.FIXED = PRINTED
        calibrate_plain.main(sys.argv[2], "fixed")
    else:
        for name in sys.argv[1:] or PRINTED:
            subprocess.run([sys.executable, __file__, "--one", name],
                           env=dict(os.environ, MALLOC_ARENA_MAX="1", OMP_NUM_THREADS="1"), check=False)
