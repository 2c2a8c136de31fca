import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb, gc, weakref
from transformers import BertConfig, BertForSequenceClassification
torch.manual_seed(0)
cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, num_labels=3)
model = BertForSequenceClassification(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
batch = {"input_ids": torch.randint(0, 1000, (8, 64)), "labels": torch.randint(0,3,(8,))}
model(**batch).loss.backward(); opt.step()
rep = vramnb.profile_step(model, batch, optimizer=opt)
w = weakref.ref(model); wp = weakref.ref(next(model.parameters()))
del model, opt, batch; gc.collect()
print("model alive after del with rep alive:", w() is not None, "param alive:", wp() is not None)
if w() is not None:
    for r in gc.get_referrers(w()): print(type(r), str(r)[:100])
with vramnb.vram() as m: pass
print("with rep alive:", m.report)
del rep; gc.collect()
with vramnb.vram() as m: pass
print("after del rep:", m.report)
