"""Every torchvision model: classification, segmentation, detection and video.

The list is ``torchvision.models.list_models(module=...)`` of the installed
torchvision, not a choice: a model torchvision adds is in the zoo the next run.
Each model is built with ``weights=None`` (random weights) in train mode, fed
its documented input size and trained with the loss torchvision's references
train it with:

- classification: the smallest crop size among the model's weights'
  transforms (224 for most, 299 for inception_v3, 240-600 for EfficientNets,
  256 for Swin V2; 224 where SWAG weights also document 384-518);
  cross-entropy on the logits. GoogLeNet and Inception v3 are built as
  ``weights=None`` builds them, with their auxiliary classifiers, whose logits
  enter the loss as the usual recipe weighs them (PyTorch's fine-tuning
  tutorial: ``loss + 0.4 * aux`` for Inception v3; ``loss + 0.3 * (aux1 + aux2)``
  for GoogLeNet, as its paper trains it).
- segmentation: 480 x 480, the training crop of torchvision's
  references/segmentation (weights resize to 520 for evaluation), 21 classes
  (VOC labels), ``aux_loss=True`` where the reference trains with ``--aux-loss``;
  loss ``out + 0.5 * aux``, cross-entropy with ``ignore_index=255`` on an
  (N, H, W) long mask, as references/segmentation/train.py.
- detection: 480 x 640 images (COCO's usual size; the model's own transform
  resizes them to its ``min_size``), 4 boxes per image; masks for Mask R-CNN,
  17 keypoints for Keypoint R-CNN; loss ``sum(model(images, targets).values())``.
  Detection reads values that decide shapes (proposals, matching), so an
  estimate must refuse it: ``values_change_shapes=True``.
- video: 16 frames at the weights' crop size (112 for the ResNet-3D family,
  224 for MViT, S3D and Swin3D); cross-entropy over 400 Kinetics classes.

Checkpointing: only DenseNet has its own (``memory_efficient=True``), switched
on per dense layer exactly as the constructor flag sets it.

``batch_size`` (GPU) aims at a fp32 AdamW step of a few GiB on an H200 with
activations the larger part (see ``_GPU_BATCH`` for the rule; 8 for a model
torchvision adds later); ``cpu_batch_size`` is 1 (2 where train-mode BatchNorm
sees a single value per channel at batch 1) for the nightly CPU check.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torchvision import models as M

from . import Case

_SEG_SIZE = 480  # references/segmentation: SegmentationPresetTrain(base_size=520, crop_size=480)
_DET_IMAGE = (480, 640)
_VIDEO_FRAMES = 16
_DET_BOXES = 4

#: GPU batch sizes: a fp32 AdamW step of ~2-6 GiB on an H200 with activations the larger part.
#: Rule: static = 4 x parameter bytes (weights, gradients, AdamW's two states); per sample =
#: 1.25 x the bytes saved for backward in a forward on the meta device (the 0.25: temporaries);
#: the largest power of 2 with static + batch x per sample <= 4 GiB, else <= 6 GiB while
#: activations stay under the static part, else the smallest power of 2 whose activations
#: reach the static part (ViT-L/H, RegNet-Y-128GF: 11-26 GiB). Detection (values decide the
#: memory): the per-GPU batch of torchvision's references/detection (2; SSD 16 for 4 x 300 px,
#: SSDlite 24), 8-16 for the MobileNet FPNs. A model missing here (added to torchvision later) gets 8.
_GPU_BATCH: dict[str, int] = {
    "alexnet": 512, "convnext_base": 8, "convnext_large": 8, "convnext_small": 16, "convnext_tiny": 16,
    "deeplabv3_mobilenet_v3_large": 8, "deeplabv3_resnet101": 2, "deeplabv3_resnet50": 2, "densenet121": 16,
    "densenet161": 8, "densenet169": 16, "densenet201": 8, "efficientnet_b0": 32, "efficientnet_b1": 16,
    "efficientnet_b2": 8, "efficientnet_b3": 8, "efficientnet_b4": 4, "efficientnet_b5": 2, "efficientnet_b6": 1,
    "efficientnet_b7": 1, "efficientnet_v2_l": 1, "efficientnet_v2_m": 2, "efficientnet_v2_s": 4,
    "fasterrcnn_mobilenet_v3_large_320_fpn": 16, "fasterrcnn_mobilenet_v3_large_fpn": 8,
    "fasterrcnn_resnet50_fpn": 2, "fasterrcnn_resnet50_fpn_v2": 2, "fcn_resnet101": 1, "fcn_resnet50": 2,
    "fcos_resnet50_fpn": 2, "googlenet": 64, "inception_v3": 16, "keypointrcnn_resnet50_fpn": 2,
    "lraspp_mobilenet_v3_large": 8, "maskrcnn_resnet50_fpn": 2, "maskrcnn_resnet50_fpn_v2": 2, "maxvit_t": 8,
    "mc3_18": 8, "mnasnet0_5": 128, "mnasnet0_75": 64, "mnasnet1_0": 64, "mnasnet1_3": 32, "mobilenet_v2": 32,
    "mobilenet_v3_large": 64, "mobilenet_v3_small": 128, "mvit_v1_b": 2, "mvit_v2_s": 1, "r2plus1d_18": 4,
    "r3d_18": 16, "regnet_x_16gf": 8, "regnet_x_1_6gf": 32, "regnet_x_32gf": 8, "regnet_x_3_2gf": 32,
    "regnet_x_400mf": 128, "regnet_x_800mf": 64, "regnet_x_8gf": 16, "regnet_y_128gf": 16, "regnet_y_16gf": 8,
    "regnet_y_1_6gf": 32, "regnet_y_32gf": 8, "regnet_y_3_2gf": 16, "regnet_y_400mf": 64, "regnet_y_800mf": 64,
    "regnet_y_8gf": 16, "resnet101": 16, "resnet152": 8, "resnet18": 128, "resnet34": 64, "resnet50": 32,
    "resnext101_32x8d": 8, "resnext101_64x4d": 8, "resnext50_32x4d": 16, "retinanet_resnet50_fpn": 2,
    "retinanet_resnet50_fpn_v2": 2, "s3d": 4, "shufflenet_v2_x0_5": 256, "shufflenet_v2_x1_0": 128,
    "shufflenet_v2_x1_5": 64, "shufflenet_v2_x2_0": 64, "squeezenet1_0": 64, "squeezenet1_1": 128,
    "ssd300_vgg16": 16, "ssdlite320_mobilenet_v3_large": 24, "swin3d_b": 1, "swin3d_s": 1, "swin3d_t": 2,
    "swin_b": 8, "swin_s": 16, "swin_t": 16, "swin_v2_b": 4, "swin_v2_s": 8, "swin_v2_t": 16, "vgg11": 64,
    "vgg11_bn": 32, "vgg13": 32, "vgg13_bn": 16, "vgg16": 32, "vgg16_bn": 16, "vgg19": 32, "vgg19_bn": 16,
    "vit_b_16": 8, "vit_b_32": 64, "vit_h_14": 16, "vit_l_16": 16, "vit_l_32": 64, "wide_resnet101_2": 16,
    "wide_resnet50_2": 16,
}

#: train-mode BatchNorm after a 1x1 map at batch 1 raises "Expected more than 1 value per channel"
_CPU_BATCH_2 = {"inception_v3", "deeplabv3_mobilenet_v3_large", "deeplabv3_resnet50", "deeplabv3_resnet101",
                "lraspp_mobilenet_v3_large", "ssdlite320_mobilenet_v3_large"}


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _smallest_crop(name: str) -> int:
    sizes = []
    for w in M.get_model_weights(name):
        crop = w.transforms.keywords.get("crop_size")
        if crop is not None:
            sizes.append(crop[0] if isinstance(crop, (tuple, list)) else crop)
    return min(sizes)


# -- classification ----------------------------------------------------------------------
def classification_batch(size: int, classes: int = 1000):
    """(n, device) -> (n x 3 x size x size images, a class per image)."""
    def make(n: int, device: str) -> Any:
        g = _gen()
        x = torch.randn(n, 3, size, size, generator=g)
        y = torch.randint(0, classes, (n,), generator=g)
        return x.to(device), y.to(device)
    return make


def _cls_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def _inception_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    out = model(x)  # InceptionOutputs(logits, aux_logits) in train mode
    return F.cross_entropy(out.logits, y) + 0.4 * F.cross_entropy(out.aux_logits, y)


def _googlenet_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    out = model(x)  # GoogLeNetOutputs(logits, aux_logits2, aux_logits1) in train mode
    return F.cross_entropy(out.logits, y) + 0.3 * (F.cross_entropy(out.aux_logits1, y)
                                                    + F.cross_entropy(out.aux_logits2, y))


def _densenet_checkpointing(model: torch.nn.Module) -> None:
    """DenseNet's own checkpointing: what ``memory_efficient=True`` sets on every dense layer."""
    from torchvision.models.densenet import _DenseLayer
    for m in model.modules():
        if isinstance(m, _DenseLayer):
            m.memory_efficient = True


def _builder(name: str, **kwargs: Any):
    def build() -> torch.nn.Module:
        kw = dict(kwargs)
        if name in ("inception_v3", "googlenet"):
            kw["init_weights"] = True  # the current default for weights=None, said explicitly (no warning)
        return M.get_model(name, weights=None, **kw).train()
    return build


def _classification() -> list[Case]:
    out = []
    for name in M.list_models(module=M):
        size = _smallest_crop(name)
        loss = {"inception_v3": _inception_loss, "googlenet": _googlenet_loss}.get(name, _cls_loss)
        ckpt = _densenet_checkpointing if name.startswith("densenet") else None
        family = "vit" if name.startswith(("vit_", "swin", "maxvit")) else "cnn"
        out.append(Case(
            name=f"torchvision/{name}", family=family, build=_builder(name), make_batch=classification_batch(size),
            forward_loss=loss, batch_size=_GPU_BATCH.get(name, 8),
            cpu_batch_size=2 if name in _CPU_BATCH_2 else 1, enable_checkpointing=ckpt,
            notes=[f"input 3x{size}x{size}"]))
    return out


# -- segmentation ------------------------------------------------------------------------
def _seg_batch(n: int, device: str) -> Any:
    g = _gen()
    x = torch.randn(n, 3, _SEG_SIZE, _SEG_SIZE, generator=g)
    y = torch.randint(0, 21, (n, _SEG_SIZE, _SEG_SIZE), generator=g)
    return x.to(device), y.to(device)


def _seg_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """references/segmentation/train.py: criterion()."""
    x, y = batch
    out = model(x)
    losses = {k: F.cross_entropy(v, y, ignore_index=255) for k, v in out.items()}
    return losses["out"] + 0.5 * losses["aux"] if "aux" in losses else losses["out"]


def _segmentation() -> list[Case]:
    out = []
    for name in M.list_models(module=M.segmentation):
        kw = {} if name.startswith("lraspp") else {"aux_loss": True}
        out.append(Case(
            name=f"torchvision/{name}", family="segmentation", build=_builder(name, num_classes=21, weights_backbone=None, **kw),
            make_batch=_seg_batch, forward_loss=_seg_loss, batch_size=_GPU_BATCH.get(name, 8),
            cpu_batch_size=2 if name in _CPU_BATCH_2 else 1,
            notes=[f"input 3x{_SEG_SIZE}x{_SEG_SIZE}, 21 classes" + (", aux head" if kw else "")]))
    return out


# -- detection ---------------------------------------------------------------------------
def _det_batch(kind: str):
    def make(n: int, device: str) -> Any:
        g = _gen()
        h, w = _DET_IMAGE
        images, targets = [], []
        for _ in range(n):
            images.append(torch.rand(3, h, w, generator=g).to(device))
            xy = torch.rand(_DET_BOXES, 2, generator=g) * torch.tensor([w / 2, h / 2])
            wh = 32 + torch.rand(_DET_BOXES, 2, generator=g) * torch.tensor([w / 2 - 32, h / 2 - 32])
            boxes = torch.cat([xy, xy + wh], dim=1)
            t = {"boxes": boxes, "labels": torch.randint(1, 91, (_DET_BOXES,), generator=g)}
            if kind == "mask":
                masks = torch.zeros(_DET_BOXES, h, w, dtype=torch.uint8)
                for i, (x0, y0, x1, y1) in enumerate(boxes.round().long().tolist()):
                    masks[i, y0:y1, x0:x1] = 1
                t["masks"] = masks
            if kind == "keypoint":
                t["labels"] = torch.ones(_DET_BOXES, dtype=torch.int64)  # person
                u = torch.rand(_DET_BOXES, 17, 2, generator=g)
                kp = boxes[:, None, :2] + u * (boxes[:, None, 2:] - boxes[:, None, :2])
                t["keypoints"] = torch.cat([kp, torch.full((_DET_BOXES, 17, 1), 2.0)], dim=2)
            targets.append({k: v.to(device) for k, v in t.items()})
        return {"images": images, "targets": targets}
    return make


def _det_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """references/detection/engine.py: ``sum(loss for loss in loss_dict.values())``."""
    return sum(model(batch["images"], batch["targets"]).values())


def _detection() -> list[Case]:
    out = []
    for name in M.list_models(module=M.detection):
        kind = "mask" if name.startswith("maskrcnn") else "keypoint" if name.startswith("keypoint") else "box"
        # weights_backbone=None too: no download, random backbone
        out.append(Case(
            name=f"torchvision/{name}", family="detection", build=_builder(name, weights_backbone=None),
            make_batch=_det_batch(kind), forward_loss=_det_loss, batch_size=_GPU_BATCH.get(name, 8),
            cpu_batch_size=2 if name in _CPU_BATCH_2 else 1, values_change_shapes=True,
            notes=[f"images 3x{_DET_IMAGE[0]}x{_DET_IMAGE[1]}, {_DET_BOXES} boxes" + (f", {kind}s" if kind != "box" else "")]))
    return out


# -- video -------------------------------------------------------------------------------
def _video_batch(size: int):
    def make(n: int, device: str) -> Any:
        g = _gen()
        x = torch.randn(n, 3, _VIDEO_FRAMES, size, size, generator=g)
        y = torch.randint(0, 400, (n,), generator=g)
        return x.to(device), y.to(device)
    return make


def _video() -> list[Case]:
    out = []
    for name in M.list_models(module=M.video):
        size = _smallest_crop(name)
        out.append(Case(
            name=f"torchvision/{name}", family="video", build=_builder(name), make_batch=_video_batch(size),
            forward_loss=_cls_loss, batch_size=_GPU_BATCH.get(name, 8), cpu_batch_size=1,
            notes=[f"input 3x{_VIDEO_FRAMES}x{size}x{size}"]))
    return out


def cases() -> list[Case]:
    """Every classification, segmentation, detection and video model of the installed torchvision."""
    return _classification() + _segmentation() + _detection() + _video()

