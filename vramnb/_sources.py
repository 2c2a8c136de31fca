"""The sources of a training step's memory, their order, and their colours.

One place for the names the field uses and one fixed colour per source, so
every table and plot (and the widget panel) agrees. Colours are the Okabe–Ito
colour-blind-safe palette, readable on light and dark backgrounds.
Pure standard library.
"""

from __future__ import annotations

__all__ = ["SOURCES", "COLORS", "DESCRIPTIONS", "DEVICE_ROWS"]

#: Sources of allocated memory, in display (stacking) order. Each live storage
#: belongs to exactly one; when several fit, the earliest in this order wins
#: (a parameter saved for backward is a parameter, not an activation).
SOURCES: tuple[str, ...] = (
    "parameters",
    "buffers",
    "input batch",
    "gradients",
    "optimizer state",
    "activations",
    "workspace",
    "temporaries",
    "other",
)

#: Rows of device memory beyond allocated tensors (CUDA only).
DEVICE_ROWS: tuple[str, ...] = ("reserved − allocated", "non-PyTorch")

COLORS: dict[str, str] = {
    "parameters": "#0072B2",
    "buffers": "#56B4E9",
    "input batch": "#8C564B",
    "gradients": "#009E73",
    "optimizer state": "#E69F00",
    "activations": "#D55E00",
    "workspace": "#CC79A7",
    "temporaries": "#F0E442",
    "other": "#CFCFCF",
    "reserved − allocated": "#BBBBBB",
    "non-PyTorch": "#444444",
}

DESCRIPTIONS: dict[str, str] = {
    "parameters": "the model's parameters (weights), each storage once",
    "buffers": "module buffers (e.g. BatchNorm running statistics)",
    "input batch": "the bytes the batch's tensors view (a slice of a dataset: its rows; the rest is other)",
    "gradients": "parameters' .grad",
    "optimizer state": "tensors in optimizer.state (Adam: exp_avg and exp_avg_sq, 2 × parameter bytes)",
    "activations": "tensors autograd saved for backward (read from the graph when backward starts; no hooks)",
    "workspace": "allocations of libraries (cuBLAS/cuDNN workspaces) that back no tensor",
    "temporaries": "everything else the step allocated: outputs, intermediate results, the loss",
    "other": "memory held before the step by something else in the process",
    "reserved − allocated": "cached by the CUDA caching allocator, not in use (includes fragmentation)",
    "non-PyTorch": "device memory outside PyTorch's allocator: CUDA context, libraries, other processes",
}
