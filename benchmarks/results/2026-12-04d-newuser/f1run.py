import torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=2000, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512)
model = LlamaForCausalLM(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 2000, (64, 256))
batch = {"input_ids": ids, "labels": ids}
exec(open("/tmp/user5/f1_code.py").read())
print("ran ok", loss.item())
