import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb, time
from transformers import T5Config, T5ForConditionalGeneration
torch.manual_seed(0); random.seed(0); np.random.seed(0)
cfg = T5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_decoder_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0)
model = T5ForConditionalGeneration(cfg)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randint(1, 1000, (8, 64)); y = torch.randint(1, 1000, (8, 32))
batch = {"input_ids": x, "labels": y}
P = sum(p.numel() for p in model.parameters()); print("P", P, "bytes", 4*P)
s0 = snap(model, opt)
t=time.time()
cmp = vramnb.compare(model, batch, optimizer=opt,
    toggles={"precision": ["fp32", "bf16"], "checkpointing": ["off", "every block"], "optimizer": ["yours", "SGD momentum", "Adafactor"], "lora": ["off","r=8"]})
print("took", time.time()-t)
print(cmp)
print("diff:", same(s0, snap(model, opt)))
print(torch.get_rng_state().sum(), random.random(), np.random.rand())
