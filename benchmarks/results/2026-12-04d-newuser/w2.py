import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration
torch.manual_seed(0)
wcfg = WhisperConfig(vocab_size=1000, num_mel_bins=80, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, d_model=128, encoder_ffn_dim=256, decoder_ffn_dim=256, max_source_positions=1500, max_target_positions=64, decoder_start_token_id=1, pad_token_id=0)
whisper = WhisperForConditionalGeneration(wcfg)
feats = torch.randn(2, 80, 3000); labels = torch.randint(2, 1000, (2, 20))
out = whisper(input_features=feats, labels=labels)
print(out.keys())
pkv = out.past_key_values
print(type(pkv), type(pkv).__mro__)
print({k: type(v) for k, v in vars(pkv).items()})
tot = 0
def walk(o, d=0):
    global tot
    if isinstance(o, torch.Tensor): tot += o.untyped_storage().nbytes(); return
    if isinstance(o, (list, tuple)): [walk(x, d+1) for x in o]; return
    if isinstance(o, dict): [walk(x, d+1) for x in o.values()]; return
    if hasattr(o, "__dict__") and d < 6: [walk(x, d+1) for x in vars(o).values()]
walk(pkv); print("cache bytes", tot, tot/2**20)
