"""PyTorch's own modules, as users assemble them: ``nn.Transformer*``,
``nn.MultiheadAttention``, the RNNs, 3-D convolutions and a plain MLP.

Each model is a small user module around the PyTorch one (an embedding and a
head where it needs tokens). Checkpointing, where it is natural, is what a user
writes: a ``checkpointing`` flag on the module whose forward then runs each layer
through ``torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)``;
the RNNs (one fused module) have none.

Transformer sizes: d 512, 8 heads, feed-forward 2048, dropout 0.1, 6 layers
(the ``nn.Transformer`` defaults), sequences of 256 tokens, vocabulary 8192.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from . import Case

D, HEADS, FF, LAYERS, DROPOUT = 512, 8, 2048, 6, 0.1
SEQ, VOCAB = 256, 8192


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _causal(n: int, device: torch.device) -> torch.Tensor:
    return nn.Transformer.generate_square_subsequent_mask(n, device=device)


def _enable(model: nn.Module) -> None:
    model.checkpointing = True


def _tokens(n: int, device: str, seq: int = SEQ) -> Any:
    """(input ids, next-token labels)."""
    ids = torch.randint(0, VOCAB, (n, seq + 1), generator=_gen())
    return ids[:, :-1].contiguous().to(device), ids[:, 1:].contiguous().to(device)


def _lm_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


# -- nn.Transformer ----------------------------------------------------------------------
class Seq2Seq(nn.Module):
    """Token embeddings, ``nn.Transformer`` (encoder-decoder, batch_first), an LM head."""

    def __init__(self) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(VOCAB, D)
        self.tgt_emb = nn.Embedding(VOCAB, D)
        self.transformer = nn.Transformer(D, HEADS, LAYERS, LAYERS, FF, DROPOUT, batch_first=True)
        self.head = nn.Linear(D, VOCAB)
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


def _seq2seq_batch(n: int, device: str) -> Any:
    g = _gen()
    src = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    tgt = torch.randint(0, VOCAB, (n, SEQ + 1), generator=g)
    return src.to(device), tgt[:, :-1].contiguous().to(device), tgt[:, 1:].contiguous().to(device)


def _seq2seq_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    src, tgt, labels = batch
    logits = model(src, tgt)
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


# -- nn.TransformerEncoder ---------------------------------------------------------------
class Encoder(nn.Module):
    """``nn.TransformerEncoder`` of pre-norm layers (dropout 0.1), optionally causal."""

    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.emb = nn.Embedding(VOCAB, D)
        layer = nn.TransformerEncoderLayer(D, HEADS, FF, DROPOUT, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, norm=nn.LayerNorm(D), enable_nested_tensor=False)
        self.head = nn.Linear(D, VOCAB)
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

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        layer = nn.TransformerDecoderLayer(D, HEADS, FF, DROPOUT, batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, LAYERS, norm=nn.LayerNorm(D))
        self.head = nn.Linear(D, VOCAB)
        self.checkpointing = False

    def forward(self, ids: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        mask = _causal(ids.shape[1], ids.device)
        if not self.checkpointing:
            return self.head(self.decoder(x, memory, tgt_mask=mask, tgt_is_causal=True))
        for layer in self.decoder.layers:
            x = checkpoint(layer, x, memory, tgt_mask=mask, tgt_is_causal=True, use_reentrant=False)
        return self.head(self.decoder.norm(x))


def _decoder_batch(n: int, device: str) -> Any:
    ids, labels = _tokens(n, device)
    memory = torch.randn(n, 196, D, generator=_gen())
    return ids, memory.to(device), labels


def _decoder_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    ids, memory, labels = batch
    logits = model(ids, memory)
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


# -- nn.MultiheadAttention in a hand-written block ---------------------------------------
class Block(nn.Module):
    """Pre-norm block around ``nn.MultiheadAttention`` called as most users call it,
    ``attn(h, h, h)[0]`` (``need_weights`` left at its default)."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, dropout=DROPOUT, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D, FF), nn.GELU(), nn.Linear(FF, D), nn.Dropout(DROPOUT))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h)[0]
        return x + self.mlp(self.ln2(x))


class MHAStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)
        self.checkpointing = False

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointing else block(x)
        return self.head(self.norm(x))


# -- RNNs --------------------------------------------------------------------------------
class RNNLM(nn.Module):
    """Embedding, a 2-layer ``nn.LSTM``/``nn.GRU``/``nn.RNN`` (batch_first), a head per token."""

    def __init__(self, kind: str, hidden: int, out: int, bidirectional: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind]
        self.rnn = cls(D, hidden, num_layers=2, batch_first=True, dropout=DROPOUT, bidirectional=bidirectional)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), out)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(self.emb(ids))
        return self.head(y)


TAGS = 32


def _tagging_batch(n: int, device: str) -> Any:
    g = _gen()
    ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    tags = torch.randint(0, TAGS, (n, SEQ), generator=g)
    return ids.to(device), tags.to(device)


# -- 3-D convolutions --------------------------------------------------------------------
FRAMES, SIDE, CLASSES_3D = 16, 112, 400


class Conv3DNet(nn.Module):
    """Stages of Conv3d + BatchNorm3d + ReLU, pooled between stages, a linear classifier."""

    def __init__(self, widths: tuple[int, ...] = (32, 64, 128, 256)) -> None:
        super().__init__()
        blocks, c = [], 3
        for i, w in enumerate(widths):
            blocks.append(nn.Sequential(
                nn.Conv3d(c, w, 3, padding=1, bias=False), nn.BatchNorm3d(w), nn.ReLU(inplace=True),
                nn.Conv3d(w, w, 3, padding=1, bias=False), nn.BatchNorm3d(w), nn.ReLU(inplace=True),
                nn.MaxPool3d((1, 2, 2) if i == 0 else 2)))
            c = w
        self.blocks = nn.ModuleList(blocks)
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(c, CLASSES_3D)
        self.checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointing else block(x)
        return self.fc(self.pool(x).flatten(1))


def _video_batch(n: int, device: str) -> Any:
    g = _gen()
    x = torch.randn(n, 3, FRAMES, SIDE, SIDE, generator=g)
    return x.to(device), torch.randint(0, CLASSES_3D, (n,), generator=g).to(device)


# -- a plain MLP -------------------------------------------------------------------------
MLP_IN, MLP_HIDDEN, MLP_LAYERS, MLP_CLASSES = 3072, 4096, 4, 10


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        dims = [MLP_IN] + [MLP_HIDDEN] * MLP_LAYERS
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(a, b), nn.ReLU()) for a, b in zip(dims, dims[1:]))
        self.out = nn.Linear(MLP_HIDDEN, MLP_CLASSES)
        self.checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.checkpointing else layer(x)
        return self.out(x)


def _mlp_batch(n: int, device: str) -> Any:
    g = _gen()
    x = torch.randn(n, MLP_IN, generator=g)
    return x.to(device), torch.randint(0, MLP_CLASSES, (n,), generator=g).to(device)


def _cls_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def _train(build: Any) -> Any:
    return lambda: build().train()


def cases() -> list[Case]:
    """PyTorch-native cases (names ``nn/...``)."""
    return [
        Case("nn/transformer", "encoder-decoder", _train(Seq2Seq), _seq2seq_batch, _seq2seq_loss,
             batch_size=32, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=["nn.Transformer 6+6 layers, d 512, causal target mask, seq 256"]),
        Case("nn/transformer-encoder", "encoder", _train(lambda: Encoder(causal=False)), _tokens, _lm_loss,
             batch_size=64, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=["nn.TransformerEncoder, norm_first, dropout 0.1, no mask, seq 256"]),
        Case("nn/transformer-encoder-causal", "decoder", _train(lambda: Encoder(causal=True)), _tokens, _lm_loss,
             batch_size=64, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=["nn.TransformerEncoder, norm_first, dropout 0.1, causal mask (is_causal=True), seq 256"]),
        Case("nn/transformer-decoder", "decoder", _train(Decoder), _decoder_batch, _decoder_loss,
             batch_size=64, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=["nn.TransformerDecoder, norm_first, causal, memory of 196 tokens, seq 256"]),
        Case("nn/mha-block", "decoder", _train(MHAStack), _tokens, _lm_loss,
             batch_size=32, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=["6 blocks around nn.MultiheadAttention, need_weights default (True), seq 256"]),
        Case("nn/lstm", "rnn", _train(lambda: RNNLM("lstm", 1024, VOCAB)), _tokens, _lm_loss,
             batch_size=64, cpu_batch_size=2, notes=["2-layer LSTM 1024, LM head, seq 256"]),
        Case("nn/bilstm", "rnn", _train(lambda: RNNLM("lstm", 512, TAGS, bidirectional=True)), _tagging_batch,
             _lm_loss, batch_size=128, cpu_batch_size=2, notes=["2-layer bidirectional LSTM 512, tagging head, seq 256"]),
        Case("nn/gru", "rnn", _train(lambda: RNNLM("gru", 1024, VOCAB)), _tokens, _lm_loss,
             batch_size=64, cpu_batch_size=2, notes=["2-layer GRU 1024, LM head, seq 256"]),
        Case("nn/rnn", "rnn", _train(lambda: RNNLM("rnn", 1024, VOCAB)), _tokens, _lm_loss,
             batch_size=64, cpu_batch_size=2, notes=["2-layer tanh RNN 1024, LM head, seq 256"]),
        Case("nn/conv3d", "conv3d", _train(Conv3DNet), _video_batch, _cls_loss,
             batch_size=8, cpu_batch_size=1, enable_checkpointing=_enable,
             notes=[f"4 stages of 2x(Conv3d+BatchNorm3d+ReLU), input 3x{FRAMES}x{SIDE}x{SIDE}"]),
        Case("nn/mlp", "mlp", _train(MLP), _mlp_batch, _cls_loss,
             batch_size=16384, cpu_batch_size=2, enable_checkpointing=_enable,
             notes=[f"{MLP_LAYERS} x Linear({MLP_HIDDEN})+ReLU on {MLP_IN} inputs"]),
    ]
