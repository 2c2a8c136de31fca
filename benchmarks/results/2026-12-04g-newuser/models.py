"""Six+ models chosen by the new user. Each builder returns (name, model, batch, loss_fn, optimizer)."""
import torch, torch.nn as nn, torch.nn.functional as F

def cnn():
    torch.manual_seed(0)
    class CNN(nn.Module):
        def __init__(s):
            super().__init__()
            s.c1 = nn.Conv2d(3, 32, 3, padding=1); s.b1 = nn.BatchNorm2d(32)
            s.c2 = nn.Conv2d(32, 64, 3, padding=1); s.b2 = nn.BatchNorm2d(64)
            s.fc = nn.Linear(64*8*8, 10)
        def forward(s, x):
            x = F.max_pool2d(F.relu(s.b1(s.c1(x))), 2)
            x = F.max_pool2d(F.relu(s.b2(s.c2(x))), 2)
            return s.fc(x.flatten(1))
    m = CNN(); b = (torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,)))
    return "cnn_bn_adam", m, b, (lambda m, b: F.cross_entropy(m(b[0]), b[1])), torch.optim.Adam(m.parameters(), 1e-3)

def lstm_tied():
    torch.manual_seed(0)
    class LM(nn.Module):
        def __init__(s, V=5000, d=256):
            super().__init__()
            s.emb = nn.Embedding(V, d); s.rnn = nn.LSTM(d, d, num_layers=2, batch_first=True); s.out = nn.Linear(d, V)
            s.out.weight = s.emb.weight  # tied
        def forward(s, x):
            h, _ = s.rnn(s.emb(x)); return s.out(h)
    m = LM(); x = torch.randint(0, 5000, (8, 65))
    return "lstm_tied_sgdm", m, x, (lambda m, b: F.cross_entropy(m(b[:, :-1]).flatten(0, 1), b[:, 1:].flatten())), \
        torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

def qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=8000, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    m = Qwen2ForCausalLM(cfg); ids = torch.randint(0, 8000, (4, 64))
    return "qwen2_gqa_adamw", m, {"input_ids": ids, "labels": ids}, None, torch.optim.AdamW(m.parameters(), 1e-4)

def t5():
    from transformers import T5Config, T5ForConditionalGeneration
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=4000, d_model=256, d_kv=32, d_ff=512, num_layers=3, num_decoder_layers=3, num_heads=8, decoder_start_token_id=0, pad_token_id=0)
    m = T5ForConditionalGeneration(cfg)
    b = {"input_ids": torch.randint(0, 4000, (4, 48)), "labels": torch.randint(0, 4000, (4, 24))}
    return "t5_encdec_adam", m, b, None, torch.optim.Adam(m.parameters(), 1e-4)

def unet():
    from diffusers import UNet2DModel
    torch.manual_seed(0)
    m = UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
                    block_out_channels=(32, 64, 64), down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
                    up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8)
    b = (torch.randn(4, 3, 32, 32), torch.randint(0, 1000, (4,)), torch.randn(4, 3, 32, 32))
    return "diffusers_unet_adamw", m, b, (lambda m, b: F.mse_loss(m(b[0], b[1]).sample, b[2])), torch.optim.AdamW(m.parameters(), 1e-4)

def gat():
    from torch_geometric.nn import GATConv
    from torch_geometric.data import Data
    torch.manual_seed(0)
    class GAT(nn.Module):
        def __init__(s):
            super().__init__(); s.g1 = GATConv(64, 32, heads=4); s.g2 = GATConv(128, 7, heads=1)
        def forward(s, data):
            h = F.elu(s.g1(data.x, data.edge_index)); return s.g2(h, data.edge_index)
    n = 2000
    data = Data(x=torch.randn(n, 64), edge_index=torch.randint(0, n, (2, 20000)), y=torch.randint(0, 7, (n,)))
    m = GAT()
    return "pyg_gat_adam", m, data, (lambda m, d: F.cross_entropy(m(d), d.y)), torch.optim.Adam(m.parameters(), 5e-3)

ALL = [cnn, lstm_tied, qwen2, t5, unet, gat]
