"""PyTorch's own modules, as users assemble them: ``nn.Transformer*``,
``nn.MultiheadAttention``, the RNNs, 3-D convolutions and a plain MLP.

Each model is a small user module around the PyTorch one (an embedding and a
head where it needs tokens). Checkpointing, where it is natural, is what a user
writes: a ``checkpointing`` flag on the module whose forward then runs each layer
through ``torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)``;
the RNNs (one fused module) have none.

Transformer sizes: d 512, 8 heads, feed-forward 2048, dropout 0.1, 6 layers
(the ``nn.Transformer`` defaults), sequences of 256 tokens, vocabulary 8192.
``cases(small=True)`` gives the same architectures at a CI size (:data:`SMALL`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from . import Case

DROPOUT = 0.1


@dataclass(frozen=True)
class Size:
    """The dimensions of the native cases."""

    d: int = 512
    heads: int = 8
    ff: int = 2048
    layers: int = 6
    seq: int = 256
    vocab: int = 8192
    memory: int = 196          # decoder memory tokens
    lstm: int = 1024           # hidden size of the LSTM, GRU and RNN language models
    bilstm: int = 512
    tags: int = 32
    frames: int = 16
    side: int = 112
    widths: tuple[int, ...] = (32, 64, 128, 256)
    classes_3d: int = 400
    mlp_in: int = 3072
    mlp_hidden: int = 4096
    mlp_layers: int = 4
    mlp_classes: int = 10


FULL = Size()
#: the same architectures at a size for CI (seconds on a 2-core CPU)
SMALL = replace(FULL, d=64, heads=4, ff=128, layers=2, seq=16, vocab=256, memory=8, lstm=64, bilstm=32, tags=8,
                frames=4, side=16, widths=(4, 8), classes_3d=10, mlp_in=64, mlp_hidden=128, mlp_layers=3)


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _causal(n: int, device: torch.device) -> torch.Tensor:
    return nn.Transformer.generate_square_subsequent_mask(n, device=device)


def _enable(model: nn.Module) -> None:
    model.checkpointing = True


def _tokens(z: Size):
    def make(n: int, device: str) -> Any:
        """(input ids, next-token labels)."""
        ids = torch.randint(0, z.vocab, (n, z.seq + 1), generator=_gen())
        return ids[:, :-1].contiguous().to(device), ids[:, 1:].contiguous().to(device)
    return make


def _lm_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    *inputs, labels = batch
    logits = model(*inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


# -- nn.Transformer ----------------------------------------------------------------------
class Seq2Seq(nn.Module):
    """Token embeddings, ``nn.Transformer`` (encoder-decoder, batch_first), an LM head."""

    def __init__(self, z: Size) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(z.vocab, z.d)
        self.tgt_emb = nn.Embedding(z.vocab, z.d)
        self.transformer = nn.Transformer(z.d, z.heads, z.layers, z.layers, z.ff, DROPOUT, batch_first=True)
        self.head = nn.Linear(z.d, z.vocab)
        self.checkpointing = False

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        mask = _causal(tgt.shape[1], tgt.device)
        s, t = self.src_emb(src), self.tgt_emb(tgt)
        if not self.checkpointing:
            return self.head(self.transformer(s, t, tgt_mask=mask, tgt_is_causal=True))
        enc, dec = self.transformer.encoder, self.transformer.decoder
        for layer in enc.layers:
            s = checkpoint(layer, s, use_reentrant=False)
        s = enc.norm(s)
        for layer in dec.layers:
            t = checkpoint(layer, t, s, tgt_mask=mask, tgt_is_causal=True, use_reentrant=False)
        return self.head(dec.norm(t))


def _seq2seq_batch(z: Size):
    def make(n: int, device: str) -> Any:
        """(source ids, target ids, next-token labels)."""
        g = _gen()
        src = torch.randint(0, z.vocab, (n, z.seq), generator=g)
        tgt = torch.randint(0, z.vocab, (n, z.seq + 1), generator=g)
        return src.to(device), tgt[:, :-1].contiguous().to(device), tgt[:, 1:].contiguous().to(device)
    return make


# -- nn.TransformerEncoder ---------------------------------------------------------------
class Encoder(nn.Module):
    """``nn.TransformerEncoder`` of pre-norm layers (dropout 0.1), optionally causal."""

    def __init__(self, z: Size, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.emb = nn.Embedding(z.vocab, z.d)
        layer = nn.TransformerEncoderLayer(z.d, z.heads, z.ff, DROPOUT, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, z.layers, norm=nn.LayerNorm(z.d), enable_nested_tensor=False)
        self.head = nn.Linear(z.d, z.vocab)
        self.checkpointing = False

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        mask = _causal(ids.shape[1], ids.device) if self.causal else None
        if not self.checkpointing:
            return self.head(self.encoder(x, mask=mask, is_causal=self.causal))
        for layer in self.encoder.layers:
            x = checkpoint(layer, x, src_mask=mask, is_causal=self.causal, use_reentrant=False)
        return self.head(self.encoder.norm(x))


# -- nn.TransformerDecoder ---------------------------------------------------------------
class Decoder(nn.Module):
    """``nn.TransformerDecoder`` (pre-norm, causal) over a memory given in the batch
    (e.g. an image encoder's features)."""

    def __init__(self, z: Size) -> None:
        super().__init__()
        self.emb = nn.Embedding(z.vocab, z.d)
        layer = nn.TransformerDecoderLayer(z.d, z.heads, z.ff, DROPOUT, batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, z.layers, norm=nn.LayerNorm(z.d))
        self.head = nn.Linear(z.d, z.vocab)
        self.checkpointing = False

    def forward(self, ids: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        mask = _causal(ids.shape[1], ids.device)
        if not self.checkpointing:
            return self.head(self.decoder(x, memory, tgt_mask=mask, tgt_is_causal=True))
        for layer in self.decoder.layers:
            x = checkpoint(layer, x, memory, tgt_mask=mask, tgt_is_causal=True, use_reentrant=False)
        return self.head(self.decoder.norm(x))


def _decoder_batch(z: Size):
    def make(n: int, device: str) -> Any:
        """(target ids, memory, next-token labels)."""
        ids, labels = _tokens(z)(n, device)
        memory = torch.randn(n, z.memory, z.d, generator=_gen())
        return ids, memory.to(device), labels
    return make


# -- nn.MultiheadAttention in a hand-written block ---------------------------------------
class Block(nn.Module):
    """Pre-norm block around ``nn.MultiheadAttention`` called as most users call it,
    ``attn(h, h, h)[0]`` (``need_weights`` left at its default)."""

    def __init__(self, z: Size) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(z.d), nn.LayerNorm(z.d)
        self.attn = nn.MultiheadAttention(z.d, z.heads, dropout=DROPOUT, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(z.d, z.ff), nn.GELU(), nn.Linear(z.ff, z.d), nn.Dropout(DROPOUT))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h)[0]
        return x + self.mlp(self.ln2(x))


class MHAStack(nn.Module):
    def __init__(self, z: Size) -> None:
        super().__init__()
        self.emb = nn.Embedding(z.vocab, z.d)
        self.blocks = nn.ModuleList(Block(z) for _ in range(z.layers))
        self.norm = nn.LayerNorm(z.d)
        self.head = nn.Linear(z.d, z.vocab)
        self.checkpointing = False

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointing else block(x)
        return self.head(self.norm(x))


# -- RNNs --------------------------------------------------------------------------------
class RNNLM(nn.Module):
    """Embedding, a 2-layer ``nn.LSTM``/``nn.GRU``/``nn.RNN`` (batch_first, dropout 0.1
    between the layers), a head per token."""

    def __init__(self, z: Size, kind: str, hidden: int, out: int, bidirectional: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(z.vocab, z.d)
        cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind]
        self.rnn = cls(z.d, hidden, num_layers=2, batch_first=True, dropout=DROPOUT, bidirectional=bidirectional)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), out)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(self.emb(ids))
        return self.head(y)


def _tagging_batch(z: Size):
    def make(n: int, device: str) -> Any:
        """(token ids, a tag per token)."""
        g = _gen()
        ids = torch.randint(0, z.vocab, (n, z.seq), generator=g)
        return ids.to(device), torch.randint(0, z.tags, (n, z.seq), generator=g).to(device)
    return make


# -- 3-D convolutions --------------------------------------------------------------------
class Conv3DNet(nn.Module):
    """Stages of 2 x (Conv3d + BatchNorm3d + ReLU), pooled between stages, a linear classifier."""

    def __init__(self, z: Size) -> None:
        super().__init__()
        blocks, c = [], 3
        for i, w in enumerate(z.widths):
            blocks.append(nn.Sequential(
                nn.Conv3d(c, w, 3, padding=1, bias=False), nn.BatchNorm3d(w), nn.ReLU(inplace=True),
                nn.Conv3d(w, w, 3, padding=1, bias=False), nn.BatchNorm3d(w), nn.ReLU(inplace=True),
                nn.MaxPool3d((1, 2, 2) if i == 0 else 2)))
            c = w
        self.blocks = nn.ModuleList(blocks)
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(c, z.classes_3d)
        self.checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointing else block(x)
        return self.fc(self.pool(x).flatten(1))


def _classes_batch(shape: tuple[int, ...], classes: int):
    def make(n: int, device: str) -> Any:
        """(inputs, a class per sample)."""
        g = _gen()
        x = torch.randn(n, *shape, generator=g)
        return x.to(device), torch.randint(0, classes, (n,), generator=g).to(device)
    return make


# -- a plain MLP -------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self, z: Size) -> None:
        super().__init__()
        dims = [z.mlp_in] + [z.mlp_hidden] * z.mlp_layers
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(a, b), nn.ReLU()) for a, b in itertools.pairwise(dims))
        self.out = nn.Linear(z.mlp_hidden, z.mlp_classes)
        self.checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.checkpointing else layer(x)
        return self.out(x)


def _cls_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def _train(build: Any, *args: Any, **kwargs: Any) -> Any:
    return lambda: build(*args, **kwargs).train()


def cases(small: bool = False) -> list[Case]:
    """PyTorch-native cases (names ``nn/...``); ``small``: at the CI size :data:`SMALL`."""
    z = SMALL if small else FULL
    tokens = _tokens(z)
    seq = f"seq {z.seq}, d {z.d}, {z.layers} layers"
    return [
        Case("nn/transformer", "encoder-decoder", _train(Seq2Seq, z), _seq2seq_batch(z), _lm_loss,
             batch_size=8, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=[f"nn.Transformer {z.layers}+{z.layers} layers, causal target mask, {seq}"]),
        Case("nn/transformer-encoder", "encoder", _train(Encoder, z, causal=False), tokens, _lm_loss,
             batch_size=16, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=[f"nn.TransformerEncoder, norm_first, dropout 0.1, no mask, {seq}"]),
        Case("nn/transformer-encoder-causal", "decoder", _train(Encoder, z, causal=True), tokens, _lm_loss,
             batch_size=16, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=[f"nn.TransformerEncoder, norm_first, dropout 0.1, causal mask (is_causal=True), {seq}"]),
        Case("nn/transformer-decoder", "decoder", _train(Decoder, z), _decoder_batch(z), _lm_loss,
             batch_size=16, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=[f"nn.TransformerDecoder, norm_first, causal, memory of {z.memory} tokens, {seq}"]),
        Case("nn/mha-block", "decoder", _train(MHAStack, z), tokens, _lm_loss,
             batch_size=16, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=[f"blocks around nn.MultiheadAttention, need_weights default (True), {seq}"]),
        Case("nn/lstm", "rnn", _train(RNNLM, z, "lstm", z.lstm, z.vocab), tokens, _lm_loss,
             batch_size=32, cpu_batch_size=2, notes=[f"2-layer LSTM {z.lstm}, LM head, seq {z.seq}"]),
        Case("nn/bilstm", "rnn", _train(RNNLM, z, "lstm", z.bilstm, z.tags, bidirectional=True), _tagging_batch(z),
             _lm_loss, batch_size=64, cpu_batch_size=2,
             notes=[f"2-layer bidirectional LSTM {z.bilstm}, tagging head, seq {z.seq}"]),
        Case("nn/gru", "rnn", _train(RNNLM, z, "gru", z.lstm, z.vocab), tokens, _lm_loss,
             batch_size=64, cpu_batch_size=2, notes=[f"2-layer GRU {z.lstm}, LM head, seq {z.seq}"]),
        Case("nn/rnn", "rnn", _train(RNNLM, z, "rnn", z.lstm, z.vocab), tokens, _lm_loss,
             batch_size=128, cpu_batch_size=2, notes=[f"2-layer tanh RNN {z.lstm}, LM head, seq {z.seq}"]),
        Case("nn/conv3d", "conv3d", _train(Conv3DNet, z), _classes_batch((3, z.frames, z.side, z.side), z.classes_3d),
             _cls_loss, batch_size=16, cpu_batch_size=1, enable_checkpointing=_enable,
             notes=[f"{len(z.widths)} stages of 2x(Conv3d+BatchNorm3d+ReLU), input 3x{z.frames}x{z.side}x{z.side}"]),
        Case("nn/mlp", "mlp", _train(MLP, z), _classes_batch((z.mlp_in,), z.mlp_classes), _cls_loss,
             batch_size=16384, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=[f"{z.mlp_layers} x Linear({z.mlp_hidden})+ReLU on {z.mlp_in} inputs"]),
    ]
