import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb, time
from transformers import BertConfig, BertForSequenceClassification
def mk():
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, num_labels=3)
    model = BertForSequenceClassification(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 1000, (8, 64)); labels = torch.randint(0,3,(8,))
    return model, opt, {"input_ids": ids, "labels": labels}
for pre in [False, True]:
    model, opt, batch = mk()
    if pre:
        model(**batch).loss.backward(); opt.step()
    rep = vramnb.profile_step(model, batch, optimizer=opt)
    print("pre-grads", pre); print(rep)
# manual: steady step measured with vram()
model, opt, batch = mk()
for i in range(2):
    model(**batch).loss.backward(); opt.step(); opt.zero_grad()
with vramnb.vram() as m:
    model(**batch).loss.backward(); opt.step(); opt.zero_grad()
print(m.report)
