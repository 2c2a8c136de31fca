import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb, time
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=2000, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512)
model = LlamaForCausalLM(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 2000, (8, 128))
P = sum(p.numel() for p in model.parameters()); print("P", P, "fp32", 4*P)
for par in ["ddp", "zero2", "fsdp"]:
    e = vramnb.estimate(model, {"input_ids": ids, "labels": ids}, optimizer=opt, target="H100", world_size=4, parallel=par)
    s = str(e).splitlines()
    print(par, [l for l in s if l.strip().startswith(("parameters", "gradients", "optimizer state", "allocated"))][:4])
