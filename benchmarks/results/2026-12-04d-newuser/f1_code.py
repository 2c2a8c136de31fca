model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
# each step:
with torch.autocast('cuda', dtype=torch.bfloat16):
    loss = model(**batch).loss
loss.backward()
opt.step()
opt.zero_grad()