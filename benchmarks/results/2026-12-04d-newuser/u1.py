import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb, time
import torch.nn.functional as F
from diffusers import UNet2DModel
torch.manual_seed(0); random.seed(0); np.random.seed(0)
model = UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(32, 64), down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8)
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(8, 3, 32, 32); t = torch.randint(0, 1000, (8,)); noise = torch.randn_like(x)
loss_fn = lambda m, b: F.mse_loss(m(b[0], b[1]).sample, noise)
P = sum(p.numel() for p in model.parameters()); print("P", P, 4*P)
s0 = snap(model, opt)
print(vramnb.profile_step(model, (x, t), loss_fn, opt)); print("diff:", same(s0, snap(model, opt)))
mb = vramnb.max_batch_size(model, (x, t), loss_fn, opt, target="T4", recipe={"precision": "bf16"})
print(mb); print("diff:", same(s0, snap(model, opt)))
