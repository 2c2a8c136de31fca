# ruff: noqa
# Compact on purpose: sent inline to the GPU machine, whose command line takes 2,000 characters.
# Plans of vramnb.fit (fit_plans.json): c1/c2 checkpointing every block / 2nd block, b bf16 autocast, mN N micro-batches.
import torch,transformers as T,json
torch.manual_seed(0);c=T.GPT2Config(n_layer=4,n_embd=256,n_head=4,vocab_size=2000,n_positions=256);sd=T.GPT2LMHeadModel(c).state_dict()
torch.manual_seed(0);ids=torch.randint(0,2000,(64,256)).cuda()
P={"b":(0,0,1),"c1":(1,0,1),"bc1":(1,1,1),"bm2":(0,1,2),"m4":(0,0,4),"m2":(0,0,2),"bf":(0,1,1),"c2m2":(2,0,2),"bc2m2":(2,1,2),"c2":(2,0,1),"bc2":(2,1,1)}
for n,(ck,bf,k) in P.items():
 m=T.GPT2LMHeadModel(c);m.load_state_dict(sd);m.cuda();o=torch.optim.AdamW(m.parameters());b={"input_ids":ids,"labels":ids}
 if ck==1:m.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant":False})
 if ck==2:m.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant":False},every_n_layers=2)
 def step():
  for i in range(k):
   p={q:v.chunk(k)[i] for q,v in b.items()}
   with torch.autocast("cuda",dtype=torch.bfloat16,enabled=bool(bf)):l=m(**p).loss/k
   l.backward()
  o.step();o.zero_grad()
 step();torch.cuda.synchronize();torch.cuda.reset_peak_memory_stats();step();torch.cuda.synchronize()
 print(json.dumps([n,torch.cuda.max_memory_allocated(),torch.cuda.max_memory_reserved()]))
 del m,o;torch.cuda.empty_cache()
