"""Hugging Face architecture families, built from their configs at a small size.

Random weights, no downloads: ``AutoConfig.for_model(model_type, **small)`` then the
task's class (the one ``AutoModelForXxx`` maps the family to), called on it. Every family keeps the library's defaults
(attention implementation, experts implementation, dropout, checkpointing flavour)
except the sizes: hidden 256 (or the family's equivalent), 4 layers, 4 heads (2
key/value heads where the family has grouped-query attention), intermediate 1024,
vocabulary 8192, except ``hf/qwen2`` which keeps Qwen2's real 151936 vocabulary
(large vocabularies are a known failure of predictions).

Each batch is what the family's documented training call takes (``input_ids``,
``attention_mask`` and ``labels`` for language models, decoder ``labels`` for
sequence-to-sequence models, ``pixel_values`` + ``labels`` for vision,
``input_values``/``input_features`` + ``labels`` for speech), at shapes fixed per
case (:attr:`HFCase.shape`): only the batch dimension varies. The loss is the
model's own ``.loss``. Token ids avoid the special ids (0-4), so no padding token
appears in a batch.

A family that does not run on the oldest transformers the GPU machine has (5.17)
does not belong here; every family below is older than 2025.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from . import Case

H, L, A, KV, I, V = 256, 4, 4, 2, 1024, 8192  # hidden, layers, heads, kv heads, intermediate, vocab  # noqa: E741
_SPECIAL = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2)
_SEQ2SEQ_SPECIAL = dict(_SPECIAL, decoder_start_token_id=2)

#: auto class per task
_AUTO = {
    "mlm": "AutoModelForMaskedLM",
    "clm": "AutoModelForCausalLM",
    "seq2seq": "AutoModelForSeq2SeqLM",
    "image": "AutoModelForImageClassification",
    "segment": "AutoModelForSemanticSegmentation",
    "ctc": "AutoModelForCTC",
    "audio-cls": "AutoModelForAudioClassification",
    "speech-seq2seq": "AutoModelForSpeechSeq2Seq",
}


@dataclass
class HFCase(Case):
    """A :class:`Case` of a Hugging Face family; ``shape`` holds its fixed input sizes
    (``seq``/``tgt`` tokens, ``image`` side in pixels, ``samples`` of 16 kHz audio,
    ``frames`` of log-mel features), ``model_type`` and ``task`` say how it was built."""

    model_type: str = ""
    task: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    shape: dict[str, int] = field(default_factory=dict)


def _llama_like(**extra: Any) -> dict[str, Any]:
    return {**dict(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=A, num_key_value_heads=KV,
                   intermediate_size=I, max_position_embeddings=1024, **_SPECIAL), **extra}


def _bert_like(**extra: Any) -> dict[str, Any]:
    return {**dict(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=A, intermediate_size=I,
                max_position_embeddings=514, **_SPECIAL), **extra}


def _bart_like(**extra: Any) -> dict[str, Any]:
    return {**dict(vocab_size=V, d_model=H, encoder_layers=L, decoder_layers=L, encoder_attention_heads=A,
                decoder_attention_heads=A, encoder_ffn_dim=I, decoder_ffn_dim=I, max_position_embeddings=1024,
                **_SEQ2SEQ_SPECIAL), **extra}


def _t5_like(**extra: Any) -> dict[str, Any]:
    return {**dict(vocab_size=V, d_model=H, d_kv=H // A, d_ff=I, num_layers=L, num_decoder_layers=L, num_heads=A,
                **_SEQ2SEQ_SPECIAL), **extra}


def _vit_like(**extra: Any) -> dict[str, Any]:
    return {**dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=A, intermediate_size=I, image_size=224,
                patch_size=16, num_labels=10), **extra}


def _wav2vec2_like(**extra: Any) -> dict[str, Any]:
    return {**dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=A, intermediate_size=I, vocab_size=32,
                pad_token_id=0), **extra}


_LM = {"seq": 256}
_S2S = {"seq": 256, "tgt": 128}
_IMG = {"image": 224}

# (model_type, family, task, config, GPU batch size, shape)
SPECS: list[tuple[str, str, str, dict[str, Any], int, dict[str, int]]] = [
    # encoders, masked language modelling
    ("bert", "encoder", "mlm", _bert_like(), 64, _LM),
    ("roberta", "encoder", "mlm", _bert_like(), 64, _LM),
    ("xlm-roberta", "encoder", "mlm", _bert_like(), 64, _LM),
    ("camembert", "encoder", "mlm", _bert_like(), 64, _LM),
    ("electra", "encoder", "mlm", _bert_like(embedding_size=128), 64, _LM),
    ("albert", "encoder", "mlm", _bert_like(embedding_size=128), 64, _LM),
    ("deberta-v2", "encoder", "mlm", _bert_like(), 32, _LM),
    ("mpnet", "encoder", "mlm", _bert_like(), 64, _LM),
    ("distilbert", "encoder", "mlm", dict(vocab_size=V, dim=H, n_layers=L, n_heads=A, hidden_dim=I,
                                          max_position_embeddings=512, pad_token_id=1), 64, _LM),
    # decoders, causal language modelling
    ("gpt2", "decoder", "clm", dict(vocab_size=V, n_embd=H, n_layer=L, n_head=A, n_inner=I, n_positions=1024,
                                    bos_token_id=0, eos_token_id=2), 64, _LM),
    ("gpt_neox", "decoder", "clm", dict(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=A,
                                        intermediate_size=I, max_position_embeddings=1024, **_SPECIAL), 64, _LM),
    ("opt", "decoder", "clm", dict(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=A, ffn_dim=I,
                                   word_embed_proj_dim=H, max_position_embeddings=1024, **_SPECIAL), 64, _LM),
    ("bloom", "decoder", "clm", dict(vocab_size=V, hidden_size=H, n_layer=L, n_head=A, **_SPECIAL), 64, _LM),
    ("gptj", "decoder", "clm", dict(vocab_size=V, n_embd=H, n_layer=L, n_head=A, n_inner=I, rotary_dim=32,
                                    n_positions=1024, bos_token_id=0, eos_token_id=2), 64, _LM),
    ("codegen", "decoder", "clm", dict(vocab_size=V, n_embd=H, n_layer=L, n_head=A, n_inner=I, rotary_dim=32,
                                       n_positions=1024, n_ctx=1024, bos_token_id=0, eos_token_id=2), 64, _LM),
    ("gpt_bigcode", "decoder", "clm", dict(vocab_size=V, n_embd=H, n_layer=L, n_head=A, n_inner=I, n_positions=1024,
                                           multi_query=True, bos_token_id=0, eos_token_id=2), 64, _LM),
    ("llama", "decoder", "clm", _llama_like(), 64, _LM),
    ("mistral", "decoder", "clm", _llama_like(), 64, _LM),
    ("qwen2", "decoder", "clm", dict(_llama_like(), vocab_size=151936), 8, _LM),
    ("qwen3", "decoder", "clm", _llama_like(head_dim=H // A), 64, _LM),
    ("gemma", "decoder", "clm", _llama_like(head_dim=H // A), 64, _LM),
    ("gemma2", "decoder", "clm", _llama_like(head_dim=H // A), 64, _LM),
    ("phi", "decoder", "clm", _llama_like(), 64, _LM),
    ("phi3", "decoder", "clm", _llama_like(), 64, _LM),
    ("stablelm", "decoder", "clm", _llama_like(), 64, _LM),
    ("starcoder2", "decoder", "clm", _llama_like(), 64, _LM),
    ("olmo", "decoder", "clm", _llama_like(), 64, _LM),
    ("granite", "decoder", "clm", _llama_like(), 64, _LM),
    ("falcon", "decoder", "clm", dict(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=A,
                                      ffn_hidden_size=I, **_SPECIAL), 64, _LM),
    # mixture of experts
    ("mixtral", "moe", "clm", _llama_like(intermediate_size=512, num_local_experts=8, num_experts_per_tok=2), 32, _LM),
    ("qwen2_moe", "moe", "clm", _llama_like(moe_intermediate_size=512, shared_expert_intermediate_size=I,
                                             num_experts=8, num_experts_per_tok=2), 32, _LM),
    ("olmoe", "moe", "clm", _llama_like(intermediate_size=512, num_experts=8, num_experts_per_tok=2), 32, _LM),
    ("switch_transformers", "moe", "seq2seq", _t5_like(num_experts=8), 32, _S2S),
    # encoder-decoders
    ("t5", "encoder-decoder", "seq2seq", _t5_like(), 32, _S2S),
    ("mt5", "encoder-decoder", "seq2seq", _t5_like(), 32, _S2S),
    ("bart", "encoder-decoder", "seq2seq", _bart_like(), 32, _S2S),
    ("mbart", "encoder-decoder", "seq2seq", _bart_like(), 32, _S2S),
    ("pegasus", "encoder-decoder", "seq2seq", _bart_like(), 32, _S2S),
    ("marian", "encoder-decoder", "seq2seq", _bart_like(), 32, _S2S),
    ("m2m_100", "encoder-decoder", "seq2seq", _bart_like(), 32, _S2S),
    ("blenderbot", "encoder-decoder", "seq2seq", _bart_like(), 32, _S2S),
    # vision transformers
    ("vit", "vit", "image", _vit_like(), 128, _IMG),
    ("deit", "vit", "image", _vit_like(), 128, _IMG),
    ("beit", "vit", "image", _vit_like(), 128, _IMG),
    ("dinov2", "vit", "image", _vit_like(patch_size=14), 128, _IMG),
    ("swin", "vit", "image", dict(embed_dim=64, depths=[1, 1, 1, 1], num_heads=[2, 4, 8, 16], image_size=224,
                                  num_labels=10), 64, _IMG),
    ("swinv2", "vit", "image", dict(embed_dim=64, depths=[1, 1, 1, 1], num_heads=[2, 4, 8, 16], image_size=224,
                                    num_labels=10), 64, _IMG),
    # convolutional networks
    ("resnet", "cnn", "image", dict(embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 1, 1],
                                    layer_type="basic", num_labels=10), 128, _IMG),
    ("convnext", "cnn", "image", dict(hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 2, 1], num_labels=10), 64, _IMG),
    ("convnextv2", "cnn", "image", dict(hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 2, 1], num_labels=10), 64,
     _IMG),
    ("regnet", "cnn", "image", dict(hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 2, 1], groups_width=16,
                                    num_labels=10), 64, _IMG),
    ("efficientnet", "cnn", "image", dict(image_size=224, width_coefficient=1.0, depth_coefficient=1.0,
                                          hidden_dim=1280, num_labels=10), 32, _IMG),
    ("mobilevit", "cnn", "image", dict(image_size=256, num_labels=10), 16, {"image": 256}),
    # segmentation
    ("segformer", "segmentation", "segment", dict(num_labels=19), 16, {"image": 512}),
    # speech
    ("whisper", "speech", "speech-seq2seq",
     dict(vocab_size=V, d_model=H, encoder_layers=L, decoder_layers=L, encoder_attention_heads=A,
          decoder_attention_heads=A, encoder_ffn_dim=I, decoder_ffn_dim=I, num_mel_bins=80, max_source_positions=750,
          max_target_positions=448, **_SEQ2SEQ_SPECIAL), 32, {"frames": 1500, "tgt": 64, "mels": 80}),
    ("speech_to_text", "speech", "speech-seq2seq",
     dict(vocab_size=V, d_model=H, encoder_layers=L, decoder_layers=L, encoder_attention_heads=A,
          decoder_attention_heads=A, encoder_ffn_dim=I, decoder_ffn_dim=I, input_feat_per_channel=80,
          **_SEQ2SEQ_SPECIAL), 32, {"frames": 1000, "tgt": 64, "mels": 80}),
    ("wav2vec2", "speech", "ctc", _wav2vec2_like(), 16, {"samples": 32000, "tgt": 40}),
    ("hubert", "speech", "ctc", _wav2vec2_like(), 16, {"samples": 32000, "tgt": 40}),
    ("wavlm", "speech", "ctc", _wav2vec2_like(), 16, {"samples": 32000, "tgt": 40}),
    ("audio-spectrogram-transformer", "speech", "audio-cls",
     dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=A, intermediate_size=I, max_length=1024,
          num_mel_bins=128, num_labels=10), 32, {"frames": 1024, "mels": 128}),
]

#: notes that say what a family's forward does with tensor values
_NOTES = {
    "ctc": [("CTC loss: labels.max() is read for a check; masked_select(labels >= 0) sizes the targets "
             "from the batch's labels")],
}


def _build(model_type: str, task: str, config: dict[str, Any]) -> torch.nn.Module:
    import transformers

    cfg = transformers.AutoConfig.for_model(model_type, **config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _model_class(model_type, task)(cfg)
    return model.train()


def _ids(g: torch.Generator, batch_size: int, n: int, vocab: int) -> torch.Tensor:
    return torch.randint(5, vocab, (batch_size, n), generator=g)


def _make_batch(task: str, config: dict[str, Any], shape: dict[str, int], batch_size: int, device: str) -> dict:
    g = torch.Generator().manual_seed(0)
    b = batch_size
    if task in ("mlm", "clm"):
        ids = _ids(g, b, shape["seq"], config["vocab_size"])
        out = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    elif task == "seq2seq":
        ids = _ids(g, b, shape["seq"], config["vocab_size"])
        out = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
               "labels": _ids(g, b, shape["tgt"], config["vocab_size"])}
    elif task == "image":
        side = shape["image"]
        out = {"pixel_values": torch.randn(b, 3, side, side, generator=g),
               "labels": torch.randint(0, config["num_labels"], (b,), generator=g)}
    elif task == "segment":
        side = shape["image"]
        out = {"pixel_values": torch.randn(b, 3, side, side, generator=g),
               "labels": torch.randint(0, config["num_labels"], (b, side, side), generator=g)}
    elif task == "ctc":
        out = {"input_values": torch.randn(b, shape["samples"], generator=g),
               "labels": torch.randint(1, config["vocab_size"], (b, shape["tgt"]), generator=g)}
    elif task == "audio-cls":
        out = {"input_values": torch.randn(b, shape["frames"], shape["mels"], generator=g),
               "labels": torch.randint(0, config["num_labels"], (b,), generator=g)}
    elif task == "speech-seq2seq":
        key = "input_features"
        feats = (torch.randn(b, shape["mels"], shape["frames"], generator=g) if "num_mel_bins" in config
                 else torch.randn(b, shape["frames"], shape["mels"], generator=g))
        out = {key: feats, "labels": _ids(g, b, shape["tgt"], config["vocab_size"])}
        if "num_mel_bins" not in config:  # Speech2Text takes the features' attention mask
            out["attention_mask"] = torch.ones(b, shape["frames"], dtype=torch.long)
    else:
        raise ValueError(f"unknown task {task!r}")
    return {k: v.to(device) for k, v in out.items()}


def _forward_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    return model(**batch).loss


def _enable_checkpointing(model: torch.nn.Module) -> None:
    model.gradient_checkpointing_enable()


_MAPPING_NAME = {
    "AutoModelForMaskedLM": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "AutoModelForCausalLM": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "AutoModelForSeq2SeqLM": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "AutoModelForImageClassification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForSemanticSegmentation": "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "AutoModelForCTC": "MODEL_FOR_CTC_MAPPING_NAMES",
    "AutoModelForAudioClassification": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForSpeechSeq2Seq": "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
}


def _model_class(model_type: str, task: str) -> type:
    import transformers
    from transformers.models.auto import modeling_auto

    name = getattr(modeling_auto, _MAPPING_NAME[_AUTO[task]])[model_type]
    return getattr(transformers, name if isinstance(name, str) else name[0])


def case(model_type: str) -> HFCase:
    """The case of one family (``model_type`` as in ``AutoConfig.for_model``)."""
    for spec in SPECS:
        if spec[0] == model_type:
            return _case(*spec)
    raise ValueError(f"no Hugging Face family {model_type!r} in the zoo; choose from {[s[0] for s in SPECS]}")


def _case(model_type: str, family: str, task: str, config: dict[str, Any], batch_size: int,
          shape: dict[str, int]) -> HFCase:
    import transformers

    checkpointing = getattr(_model_class(model_type, task), "supports_gradient_checkpointing", False)
    notes = list(_NOTES.get(task, []))
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    drops = {k: getattr(cfg, k) for k in ("layerdrop", "encoder_layerdrop", "decoder_layerdrop")
             if getattr(cfg, k, 0.0)}
    if drops:  # the library's default, kept: a step skips layers at random (torch.rand(()) read in the forward)
        notes.append(f"LayerDrop {drops}: each training step skips layers at random (a value read in the forward)")
    return HFCase(
        name=f"hf/{model_type}", family=family,
        build=lambda: _build(model_type, task, config),
        make_batch=lambda b, device: _make_batch(task, config, shape, b, device),
        forward_loss=_forward_loss, batch_size=batch_size, cpu_batch_size=2,
        enable_checkpointing=_enable_checkpointing if checkpointing else None,
        notes=notes, model_type=model_type, task=task, config=dict(config), shape=dict(shape))


def cases() -> list[Case]:
    """Every Hugging Face family of the zoo (raises ImportError without transformers)."""
    import transformers  # noqa: F401  (the zoo leaves this part out when it is missing)

    return [_case(*spec) for spec in SPECS]
