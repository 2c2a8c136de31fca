import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb, time
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0); random.seed(0); np.random.seed(0)
cfg = LlamaConfig(vocab_size=2000, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512)
model = LlamaForCausalLM(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 2000, (64, 256))
batch = {"input_ids": ids, "labels": ids}
s0 = snap(model, opt)
t=time.time()
plan = vramnb.fit(model, batch, optimizer=opt, target="1.5GiB")
print("took", time.time()-t)
print(repr(plan))
print("----CODE----")
print(plan.code)
print("diff:", same(s0, snap(model, opt)))
open("/tmp/user5/f1_code.py","w").write(plan.code)
