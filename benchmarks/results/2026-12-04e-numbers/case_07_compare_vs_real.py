"""`compare` on a GPT-2 config (2 layers, 128 wide, vocabulary 1000, batch 8 x 32, Adam) against each
technique written by hand and measured with the CPU tracker (the steady-state step's peak allocated).
Output of the run in the README: compare_vs_real.txt."""
import gc

import peft
import torch
import transformers

import vramnb

cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64)
torch.manual_seed(0)
ids0 = torch.randint(0, 1000, (8, 32)).tolist()  # a list: no tensor of this script outside the runs
RECIPES = {"checkpointing every block": {"checkpointing": "every block"}, "bf16 autocast": {"precision": "bf16"},
           "optimizer SGD": {"optimizer": "SGD"}, "2 micro-batches": {"micro_batches": 2},
           "frozen: embeddings": {"freeze": "embeddings"}, "LoRA r=8": {"lora": "r=8"},
           "zero_grad(set_to_none=False)": {"zero_grad": "zeros"}, "optimizer AdamW foreach": {"optimizer": "AdamW foreach"},
           "batch 4": {"batch_size": 4}, "forward only (no_grad)": {"mode": "no_grad"}}


def compared() -> dict[str, int]:
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    opt = torch.optim.Adam(model.parameters())
    ids = torch.tensor(ids0)
    cmp = vramnb.compare(model, {"input_ids": ids, "labels": ids.clone()}, optimizer=opt, progress=False,
                         recipes=list(RECIPES.values()))
    print(cmp)
    return {r["recipe"]: r["peak_allocated"] for r in cmp.to_records()}


def real(tech: str) -> int:
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    ids, labels = torch.tensor(ids0), torch.tensor(ids0)
    if tech == "batch 4":
        ids, labels = ids[:4].clone(), labels[:4].clone()
    if tech == "checkpointing every block":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if tech == "frozen: embeddings":
        model.transformer.wte.weight.requires_grad_(False)
        model.transformer.wpe.weight.requires_grad_(False)
    if tech == "LoRA r=8":  # vramnb's LoRA: every Conv1D of the blocks, no dropout
        model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=["c_attn", "c_proj", "c_fc"],
                                                           lora_dropout=0.0, fan_in_fan_out=True))
    params = [p for p in model.parameters() if p.requires_grad]
    if tech == "optimizer SGD":
        opt: torch.optim.Optimizer = torch.optim.SGD(params, lr=1e-3)
    elif tech == "optimizer AdamW foreach":
        opt = torch.optim.AdamW(params, foreach=True)
    else:
        opt = torch.optim.Adam(params)

    def step() -> None:
        if tech == "forward only (no_grad)":
            with torch.no_grad():
                model(input_ids=ids, labels=labels)
            return
        if tech == "2 micro-batches":
            for k in range(2):
                sl = slice(4 * k, 4 * k + 4)
                (model(input_ids=ids[sl], labels=labels[sl]).loss / 2).backward()
        elif tech == "bf16 autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
        else:
            model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=tech != "zero_grad(set_to_none=False)")

    step()
    gc.collect()
    with vramnb.vram("cpu") as r:
        step()
    assert r.report is not None
    return r.report.peak_allocated


peaks = compared()
for tech, peak in peaks.items():
    if peak is None:
        continue
    gc.collect()
    got = real(tech)
    print(f"{tech:32s} compare {peak:>10} real {got:>10} compare - real {peak - got:+}")
