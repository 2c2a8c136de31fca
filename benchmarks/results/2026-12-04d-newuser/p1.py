import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb, time
from transformers import BertConfig, BertForSequenceClassification
torch.manual_seed(0); random.seed(0); np.random.seed(0)
cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, num_labels=3)
model = BertForSequenceClassification(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 1000, (8, 64)); labels = torch.randint(0,3,(8,))
batch = {"input_ids": ids, "labels": labels}
P = sum(p.numel() for p in model.parameters())
print("P bytes", P*4)
# one real step first so opt has state
model(**batch).loss.backward(); opt.step()
s0 = snap(model, opt)
t=time.time(); rep = vramnb.profile_step(model, batch, optimizer=opt); print("took", time.time()-t)
print(rep)
print("diff after profile_step:", same(s0, snap(model, opt)))
for a in dir(rep):
    if not a.startswith("_"): print(a, end=" ")
print()
