"""The prediction engine: a training step's memory on a GPU you do not have.

Nothing here allocates on a device or changes the user's objects. The pipeline,
in the order the data flows (each module feeds the next, never the reverse):

1. ``_estimate_inputs``: check what :func:`~vramnb.estimate` is given (model,
   batch, optimizer, recipe, target) and turn failures into errors naming the
   valid choices;
2. ``_fake_model``, ``_fake``, ``_user_hooks``: fake copies (``FakeTensorMode``:
   shapes, dtypes and storages, no data) of the model, the batch and the
   optimizer, with the user's hooks that may run on them;
   ``_fake_guard`` keeps the fake step off the user's real tensors;
   ``_batch_values`` keeps real CPU shadows of what derives from the batch, for
   the values the step reads (``.item()``, boolean masks, lengths), and
   ``_value_reads`` says which it read (notes) or why it could not (errors);
   ``_library_hooks`` answers a library's "am I traced?" for tensors whose
   values are known (transformers then drops an all-ones mask, as on the GPU);
3. ``_cuda_model``: the CUDA kernels' memory-relevant choices made for fake
   *CPU* tensors (attention backend, CUDA's autocast policy, fused dropout,
   the step's own ``torch.autocast("cuda")``), registered at the dispatcher while
   the step runs, and the memory outside PyTorch by the libraries used;
   ``_kernels``: what CUDA kernels hold that no dispatcher sees (softmax-backward
   and cuDNN convolution temporaries, reductions' staging buffers, cuDNN's RNN
   with its reserve, cuDNN's attention, cuBLAS workspaces), pinned to op-level measurements on an H200;
   ``_parallel``: one rank of DDP/FSDP/ZeRO against a fake process group;
4. the step itself: the same runner and attribution as
   :func:`vramnb.profile_step` (``vramnb._step``), its storages counted by the
   exact storage tracker;
5. ``_allocator``: the allocations replayed through a model of CUDA's caching
   allocator (block rounding, segments, ``expandable_segments``, the card's
   capacity); ``_gpus``: card sizes, compute capabilities and the memory
   outside PyTorch;
6. ``_estimate``: the :class:`~vramnb.Estimate` report, with ``_accuracy``'s
   expected error (the step's kinds, classified from the operators it ran, and
   what the zoo benchmark measured for them);
   ``_batch_search``: :func:`~vramnb.max_batch_size`, a search over estimates
   (its safe mode widens the margin by the kinds' worst under-estimate).
"""
