import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb, time
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0); random.seed(0); np.random.seed(0)
cfg = LlamaConfig(vocab_size=2000, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512)
model = LlamaForCausalLM(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 2000, (4, 128))
batch = {"input_ids": ids, "labels": ids}
P = sum(p.numel() for p in model.parameters()); print("P", P, "fp32 bytes", 4*P, "adam", 8*P)
s0 = snap(model, opt)
t=time.time()
est = vramnb.estimate(model, batch, optimizer=opt, target="A100 (40 GB)", recipe={"precision": "bf16", "checkpointing": "every block"})
print("took", time.time()-t)
print(est)
print("fits", est.fits, "peak", est.peak_allocated, "dev", est.device_memory)
print("diff:", same(s0, snap(model, opt)))
t=time.time()
mb = vramnb.max_batch_size(model, batch, optimizer=opt, target="T4")
print("took", time.time()-t)
print(mb)
print("diff:", same(s0, snap(model, opt)))
