"""FSDP2 / ZeRO-2 what-if estimates against real 2-rank FSDP2 steps over gloo, on CPU.

Per model: ``vramnb.profile_distributed`` runs 2 ranks (fork), each building the model,
sharding every block then the root with ``fully_shard`` and measuring 2 steps
(``restore=False``); then ``vramnb.estimate(..., world_size=2, parallel=...)`` predicts the same
step in this process. Both are CPU storage bytes (no CUDA allocator model). Prints one JSON line
per model and parallel mode.

    PYTHONPATH=$PWD python benchmarks/results/2026-12-04b-fsdp-whatif/run.py
"""

from __future__ import annotations

import json
import sys

import torch
from torch import nn

import vramnb
from vramnb.distributed._launch import profile_distributed

BATCH, SEQ = 4, 32


def transformer() -> tuple:
    torch.manual_seed(0)
    m = nn.Transformer(d_model=64, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=128,
                       dropout=0.0, batch_first=True)
    b = (torch.randn(BATCH, SEQ, 64), torch.randn(BATCH, SEQ, 64))
    # the blocks the estimate shards one by one (vramnb.techniques.checkpointing.find_blocks: the encoder's
    # layers); the decoder's layers stay in the root's group there, so they do here
    return m, b, list(m.encoder.layers)


def gpt2() -> tuple:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1024, n_positions=64,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    ids = torch.randint(0, 1024, (BATCH, SEQ))
    return m, {"input_ids": ids, "labels": ids}, list(m.transformer.h)


def llama() -> tuple:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
                                     max_position_embeddings=64))
    ids = torch.randint(0, 1024, (BATCH, SEQ))
    return m, {"input_ids": ids, "labels": ids}, list(m.model.layers)


MODELS = {"nn.Transformer": transformer, "GPT-2 (tiny config)": gpt2, "Llama (tiny config)": llama}


def loss_fn(model, batch):  # type: ignore[no-untyped-def]
    if isinstance(batch, dict):
        return model(**batch).loss
    return model(*batch).square().mean()


def make_opt(params):  # type: ignore[no-untyped-def]
    return torch.optim.AdamW(params, foreach=False)


CURRENT: dict = {}


def train_fn(rank: int, world_size: int) -> tuple:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model, batch, blocks = MODELS[CURRENT["model"]]()
    reshard = CURRENT["parallel"] == "fsdp"
    mesh = init_device_mesh("cpu", (world_size,))
    for b in blocks:
        fully_shard(b, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model, batch, loss_fn, make_opt(model.parameters())


def _estimate(name: str, parallel: str) -> dict:
    """In a function: the model and the estimate are gone before the next fork (a forked rank inherits and
    counts whatever this process holds)."""
    model, batch, _ = MODELS[name]()
    est = vramnb.estimate(model, batch, loss_fn, make_opt, device="cpu", world_size=2, parallel=parallel, steps=2)
    e = est.steady
    return {"peak": e.peak.allocated, "gradients after zero_grad": e.mark("after zero_grad")["gradients"],
            "phase peaks": {k: v.allocated for k, v in e.phase_peaks.items()},
            "note": [n for n in est.notes if "rank 0 of" in n]}


def main() -> None:
    parallels = sys.argv[1:] or ["fsdp", "zero2"]
    for name in MODELS:
        for parallel in parallels:
            CURRENT.update(model=name, parallel=parallel)  # forked ranks read it
            rep = profile_distributed(train_fn, 2, backend="gloo", timeout=300, steps=2)
            assert rep.ok, [r.error for r in rep.ranks]
            row = {"model": name, "parallel": parallel, "torch": torch.__version__, "estimate": _estimate(name, parallel),
                   "ranks": []}
            for r in rep.ranks:
                s = r.step.steady
                row["ranks"].append({"rank": r.rank, "peak": s.peak.allocated,
                                     "other (held before the step)": s.mark("start")["other"],
                                     "gradients after zero_grad": s.mark("after zero_grad")["gradients"],
                                     "phase peaks": {k: v.allocated for k, v in s.phase_peaks.items()}})
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
