"""Is the planner's first choice the fastest plan that fits? Measured on a GPU (issue 14).

For each model (Hugging Face architectures built from configs, AdamW, bf16-capable GPU):

1. the card: a per-process cap (``torch.cuda.set_per_process_memory_fraction``) at
   ``CAP`` of the plain step's predicted device memory, so that the plain step does not fit;
2. ``vramnb.fit(model, batch, optimizer=opt, target=<the cap in bytes>, margin=0)`` on the
   estimates (the default techniques: mixed precision, checkpointing, micro-batches);
3. every plan it says fits, run for real under that cap in this process: the **code the
   planner printed**, executed as written (its set-up lines once, then its step), on a
   fresh copy of the model (same seed) and a fresh AdamW: 2 warm-up steps, then the median
   of ``STEPS`` timed steps (``torch.cuda.synchronize`` around each), its peak reserved
   memory, and whether it ran out of memory;
4. the verdict: the planner's first choice's measured time against the fastest measured
   plan that fit (goal: the same plan, or within 10 %), and predicted against measured
   time ratios.

Writes one JSON line per model to ``$OUT/fit-bench.jsonl`` as it goes, then a table.

    python benchmarks/bench_fit.py [model ...]
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
import traceback

import torch

import vramnb

CAP = 0.6
STEPS = 5
OUT = os.environ.get("OUT", "/tmp")


def models() -> dict[str, tuple]:
    import transformers as tf

    V, S, B = 8192, 512, 16
    ids = lambda: torch.randint(0, V, (B, S))  # noqa: E731
    lm = lambda x: {"input_ids": x, "labels": x}  # noqa: E731
    return {
        "gpt2": (lambda: tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=V, n_positions=S, n_embd=1024, n_layer=4,
                                                          n_head=16)), lambda: lm(ids())),
        "llama": (lambda: tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=V, hidden_size=1024, intermediate_size=2816,
                                                             num_hidden_layers=4, num_attention_heads=16,
                                                             num_key_value_heads=4, max_position_embeddings=S)),
                  lambda: lm(ids())),
        "bert": (lambda: tf.BertForMaskedLM(tf.BertConfig(vocab_size=V, hidden_size=1024, num_hidden_layers=4,
                                                          num_attention_heads=16, intermediate_size=4096,
                                                          max_position_embeddings=S)), lambda: lm(ids())),
        "opt": (lambda: tf.OPTForCausalLM(tf.OPTConfig(vocab_size=V, hidden_size=1024, num_hidden_layers=4,
                                                       ffn_dim=4096, num_attention_heads=16,
                                                       max_position_embeddings=S, word_embed_proj_dim=1024)),
                lambda: lm(ids())),
        "vit": (lambda: tf.ViTForImageClassification(tf.ViTConfig(image_size=224, patch_size=16, hidden_size=1024,
                                                                  num_hidden_layers=4, num_attention_heads=16,
                                                                  intermediate_size=4096, num_labels=1000)),
                lambda: {"pixel_values": torch.randn(64, 3, 224, 224), "labels": torch.randint(0, 1000, (64,))}),
    }


def validation() -> dict[str, tuple]:
    """Models set aside before the step-time model was changed on the five above: judged apart."""
    import transformers as tf

    V = 8192
    ids = lambda b, s: torch.randint(0, V, (b, s))  # noqa: E731
    return {
        "mistral": (lambda: tf.MistralForCausalLM(tf.MistralConfig(
            vocab_size=V, hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12,
            num_key_value_heads=4, max_position_embeddings=1024)),
            lambda: (lambda x: {"input_ids": x, "labels": x})(ids(8, 1024))),
        "t5": (lambda: tf.T5ForConditionalGeneration(tf.T5Config(
            vocab_size=V, d_model=768, d_ff=3072, num_layers=6, num_decoder_layers=6, num_heads=12, d_kv=64,
            decoder_start_token_id=0, pad_token_id=0)),
            lambda: {"input_ids": ids(16, 512), "labels": ids(16, 128)}),
        "gpt_neox": (lambda: tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(
            vocab_size=V, hidden_size=1024, intermediate_size=4096, num_hidden_layers=6, num_attention_heads=16,
            max_position_embeddings=512)), lambda: (lambda x: {"input_ids": x, "labels": x})(ids(16, 512))),
        "phi": (lambda: tf.PhiForCausalLM(tf.PhiConfig(
            vocab_size=V, hidden_size=1024, intermediate_size=4096, num_hidden_layers=4, num_attention_heads=16,
            max_position_embeddings=512)), lambda: (lambda x: {"input_ids": x, "labels": x})(ids(16, 512))),
        "convnext": (lambda: tf.ConvNextForImageClassification(tf.ConvNextConfig(
            depths=[2, 2, 6, 2], hidden_sizes=[96, 192, 384, 768], num_labels=1000)),
            lambda: {"pixel_values": torch.randn(96, 3, 224, 224), "labels": torch.randint(0, 1000, (96,))}),
    }


def build(make, make_batch, device):
    torch.manual_seed(0)
    model = make().to(device)
    model.train()
    torch.manual_seed(1)
    batch = {k: v.to(device) for k, v in make_batch().items()}
    return model, batch, torch.optim.AdamW(model.parameters(), lr=1e-4)


def run_code(code: str, make, make_batch, device) -> dict:
    """The planner's code, executed as printed: set-up lines once, then its step, timed."""
    model, batch, opt = build(make, make_batch, device)
    setup, _, step = code.partition("# each step:\n")
    ns = {"torch": torch, "model": model, "batch": batch, "optimizer": opt, "loss_fn": None}
    out: dict = {}
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    out["allocated_before"] = torch.cuda.memory_allocated()  # the model, batch and optimizer: nothing else
    try:
        exec(compile(setup, "<setup>", "exec"), ns)
        step_code = compile(step, "<step>", "exec")
        times = []
        for i in range(2 + STEPS):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            exec(step_code, ns)
            torch.cuda.synchronize()
            if i >= 2:
                times.append(time.perf_counter() - t0)
        out["seconds"] = statistics.median(times)
        out["oom"] = False
    except torch.OutOfMemoryError:
        out["oom"] = True
    out["peak_reserved"] = torch.cuda.max_memory_reserved()
    out["peak_allocated"] = torch.cuda.max_memory_allocated()
    ns.clear()
    del ns, model, batch, opt
    gc.collect()  # what a failed step's frames still hold goes before the next plan runs (run 20's Phi:
    torch.cuda.empty_cache()  # every plan after the first out-of-memory started with its memory held)
    return out


def bench(name: str, make, make_batch) -> dict:
    device = torch.device("cuda")
    model, batch, opt = build(make, make_batch, device)
    plain = vramnb.estimate(model, batch, None, opt, steps=1, warm_optimizer=True)
    total = torch.cuda.get_device_properties(0).total_memory
    cap = int(plain.device_memory * CAP)
    t0 = time.perf_counter()
    r = vramnb.fit(model, batch, None, opt, target=cap, margin=0.0, progress=False)
    fit_seconds = time.perf_counter() - t0
    del model, batch, opt
    torch.cuda.empty_cache()
    rows = []
    # a card of `cap` bytes: the allocator gets what is left once this process's memory outside it
    # (the CUDA context, libraries) is counted, as on a card of that size
    free, _ = torch.cuda.mem_get_info()
    outside = total - free - torch.cuda.memory_reserved()
    torch.cuda.set_per_process_memory_fraction((cap - outside) / total)
    try:
        for p in [p for p in r.plans if p.fits][:6]:
            m = run_code(p.code, make, make_batch, device)
            rows.append({"plan": p.recipe.describe(), "predicted_ratio": p.ratio, "predicted_seconds": p.seconds,
                         "predicted_peak": p.peak, "predicted_device_memory": p.device_memory, **m})
            print(name, rows[-1], flush=True)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    ran = [x for x in rows if not x["oom"]]
    first = rows[0] if rows else None
    fastest = min(ran, key=lambda x: x["seconds"]) if ran else None
    verdict = None
    if first is not None and fastest is not None and not first["oom"]:
        verdict = first["seconds"] / fastest["seconds"] - 1
    return {"model": name, "cap": cap, "outside_pytorch": outside, "plain_device_memory": plain.device_memory,
            "fit_seconds": fit_seconds,
            "plans_estimated": len(r.plans), "plans": rows, "first_choice": first and first["plan"],
            "measured_fastest": fastest and fastest["plan"], "first_over_fastest": verdict,
            "nothing_fits": r.best is None}


def main(names: list[str]) -> None:
    from vramnb.predict._calibrate import calibration

    zoo, held_out = models(), validation()
    path = os.path.join(OUT, "fit-bench.jsonl")
    host, achieved = calibration(torch.cuda.get_device_name())
    with open(path, "a") as f:
        f.write(json.dumps({"calibration": {"host": vars(host), "achieved": vars(achieved)}}) + "\n")
    print(host, achieved, flush=True)
    for name in names or [*zoo, *held_out]:
        part = "tuning" if name in zoo else "validation"
        try:
            res = {"set": part, **bench(name, *{**zoo, **held_out}[name])}
        except Exception:  # noqa: BLE001 - recorded, and the next model runs
            res = {"set": part, "model": name, "error": traceback.format_exc()[-2000:]}
        with open(path, "a") as f:
            f.write(json.dumps(res) + "\n")
        print(json.dumps({k: v for k, v in res.items() if k != "plans"}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
