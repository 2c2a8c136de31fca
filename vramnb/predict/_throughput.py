"""Published peak throughput of common GPUs, for the planner's step-time model. Pure data.

Dense figures (without structured sparsity) from NVIDIA's datasheets and architecture
whitepapers: FP32 on CUDA cores; TF32, and FP16/BF16 with FP32 accumulation (what PyTorch's
matmuls and convolutions use), on tensor cores; memory bandwidth; and the host link
(PCIe generation × 16 lanes, one direction). A card without BF16 tensor cores (Turing,
Volta) runs BF16 at its FP32 rate. The planner uses ratios between plans on one card, so a
common efficiency factor cancels; the figures are peaks, not measured rates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Throughput", "THROUGHPUT", "throughput", "Host", "HOST", "Achieved", "ACHIEVED"]

T, G = 1e12, 1e9


@dataclass(frozen=True)
class Throughput:
    """Peak rates of one card (FLOP/s and bytes/s).

    Attributes:
        fp32: FP32 on CUDA cores (matmuls under ``torch.get_float32_matmul_precision() == "highest"``).
        tf32: TF32 tensor cores (fp32 convolutions with cuDNN's default ``allow_tf32``; fp32
            matmuls at matmul precision "high"/"medium").
        bf16, fp16: tensor cores, FP32 accumulation.
        memory: device memory bandwidth.
        host: host link (PCIe), one direction.
    """

    fp32: float
    tf32: float
    bf16: float
    fp16: float
    memory: float
    host: float


@dataclass(frozen=True)
class Host:
    """The host's seconds to issue one ATen operator of an eager step (Python, dispatcher,
    kernel launch; views and allocations count as operators too).

    Attributes:
        forward: an operator issued from Python (a forward through ``nn.Module`` calls, the
            optimizer's step).
        backward: an operator the autograd engine runs (backward, from C++).
        source: where the figures come from.
    """

    forward: float
    backward: float
    source: str


@dataclass(frozen=True)
class Achieved:
    """The fraction of a card's peak rates that PyTorch's kernels reach.

    Attributes:
        tensor_cores: of the bf16/fp16/TF32 peak, by a large matmul.
        cuda_cores: of the FP32 peak, by a large fp32 matmul at matmul precision ``"highest"``.
        memory: of the memory bandwidth, by a large elementwise copy.
        source: where the figures come from.
    """

    tensor_cores: float
    cuda_cores: float
    memory: float
    source: str


PCIE3, PCIE4, PCIE5 = 15.75 * G, 31.5 * G, 63.0 * G

#: the names of vramnb.GPUS -> peak rates
THROUGHPUT: dict[str, Throughput] = {
    "T4 (16 GB)": Throughput(8.1 * T, 8.1 * T, 8.1 * T, 65 * T, 320 * G, PCIE3),
    "RTX 3060 (12 GB)": Throughput(12.7 * T, 12.7 * T, 25.4 * T, 25.4 * T, 360 * G, PCIE4),
    "RTX 3090 (24 GB)": Throughput(35.6 * T, 35.6 * T, 71 * T, 71 * T, 936 * G, PCIE4),
    "RTX 4090 (24 GB)": Throughput(82.6 * T, 82.6 * T, 165.2 * T, 165.2 * T, 1008 * G, PCIE4),
    "A10 (24 GB)": Throughput(31.2 * T, 62.5 * T, 125 * T, 125 * T, 600 * G, PCIE4),
    "L4 (24 GB)": Throughput(30.3 * T, 60 * T, 121 * T, 121 * T, 300 * G, PCIE4),
    "V100 (16 GB)": Throughput(15.7 * T, 15.7 * T, 15.7 * T, 125 * T, 900 * G, PCIE3),
    "V100 (32 GB)": Throughput(15.7 * T, 15.7 * T, 15.7 * T, 125 * T, 900 * G, PCIE3),
    "A100 (40 GB)": Throughput(19.5 * T, 156 * T, 312 * T, 312 * T, 1555 * G, PCIE4),
    "A100 (80 GB)": Throughput(19.5 * T, 156 * T, 312 * T, 312 * T, 2039 * G, PCIE4),
    "L40S (48 GB)": Throughput(91.6 * T, 183 * T, 362 * T, 362 * T, 864 * G, PCIE4),
    "RTX A6000 (48 GB)": Throughput(38.7 * T, 77.4 * T, 154.8 * T, 154.8 * T, 768 * G, PCIE4),
    "H100 (80 GB)": Throughput(67 * T, 494.7 * T, 989.4 * T, 989.4 * T, 3350 * G, PCIE5),
    "H200 (141 GB)": Throughput(67 * T, 494.7 * T, 989.4 * T, 989.4 * T, 4800 * G, PCIE5),
}


#: the host's cost per operator where this process has not initialised CUDA to measure it
#: (:mod:`vramnb.predict._calibrate`'s micro-benchmarks on the H200 machine's host)
HOST = Host(17.2e-6, 26.9e-6, "measured on the H200 machine's host, torch 2.11, 2026-12-01 "
            "(benchmarks/results/2026-12-01-h200-run20-fit)")

#: the fraction of peak reached on a card that is not present (or CUDA not initialised) to measure it: an H200's
#: (:mod:`vramnb.predict._calibrate`), taken for every card
ACHIEVED = Achieved(0.737, 0.757, 0.866, "an H200's, measured 2026-12-01 with torch 2.11, taken for this card "
                    "(benchmarks/results/2026-12-01-h200-run20-fit)")


def throughput(name: str) -> tuple[Throughput, str | None]:
    """The rates for a card named as in ``vramnb.GPUS`` or as the driver names it
    (``"NVIDIA H200"``, ``"this GPU (NVIDIA GeForce RTX 4090)"``), and what was assumed
    (``None``: the card is in the table; for a size, the H200's figures were taken, the card
    :func:`vramnb.predict._gpus.resolve_target` assumes for a size; else the H100's)."""
    if name in THROUGHPUT:
        return THROUGHPUT[name], None
    text = name.lower()
    for key, val in THROUGHPUT.items():
        short = key.split(" (")[0].lower()  # a whole word of the driver's name: "L4" is not "L40S"
        if re.search(rf"(?<![a-z0-9]){re.escape(short)}(?![a-z0-9])", text):
            return val, None
    if name[:1].isdigit():  # a size: the card an estimate for a size assumes (resolve_target)
        return THROUGHPUT["H200 (141 GB)"], f"a card of {name}: the H200's throughput was taken"
    return THROUGHPUT["H100 (80 GB)"], f"no throughput figures for {name!r}: the H100's were taken"
