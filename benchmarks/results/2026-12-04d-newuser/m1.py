import torch, vramnb
from transformers import CLIPConfig, CLIPModel
from peft import LoraConfig, get_peft_model
torch.manual_seed(0)
cfg = CLIPConfig(text_config=dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=32), vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=64, patch_size=16), projection_dim=32)
lora = get_peft_model(CLIPModel(cfg), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
opt = torch.optim.Adam([p for p in lora.parameters() if p.requires_grad])
batch = {"input_ids": torch.randint(0, 1000, (8, 16)), "pixel_values": torch.randn(8, 3, 64, 64)}
loss_fn = lambda m, b: m(**b, return_loss=True).loss
for n in [56542, 58519]:
    e = vramnb.estimate(lora, batch, loss_fn, opt, target="A100 (80 GB)", recipe={"precision": "bf16"}, batch_size=n)
    print(n, "fits", e.fits, "peak", e.peak_allocated/2**30, "dev", e.device_memory/2**30)
    print("\n".join(l for l in str(e).splitlines() if "A100" in l or "reserved" in l[:12] or "⚠" in l))
