import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb, gc
from transformers import BertConfig, BertForSequenceClassification
def mk():
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, num_labels=3)
    model = BertForSequenceClassification(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt, {"input_ids": torch.randint(0, 1000, (8, 64)), "labels": torch.randint(0,3,(8,))}
def alloc():
    with vramnb.vram() as m: pass
    return m.report
print("0:", alloc())
model, opt, batch = mk()
print("1 model:", alloc())
model(**batch).loss.backward(); opt.step()
print("2 after step:", alloc())
rep = vramnb.profile_step(model, batch, optimizer=opt)
print("3 after profile:", alloc())
model, opt, batch = mk(); gc.collect()
print("4 rebind:", alloc())
del rep; gc.collect()
print("5 del rep:", alloc())
