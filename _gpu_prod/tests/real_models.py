"""Real models, random init, small configs: the cases of the slow model suite and `make bench-models`.

No weights are downloaded: every model is built from a config. Vision models come from timm
(ViT, ResNet, MobileNetV3, EfficientNet), language models from transformers (GPT-2, BERT,
Llama); both are the optional ``models`` extra, and each builder raises ImportError without it.
Modes: eval, forward+backward, a training step with its optimizer inside the compiled function,
a second call at another batch or sequence size (automatic dynamic shapes: a recompile), and for
the decoders a 3-step greedy decode with a KV cache.

timm imports torchvision. torchvision 0.28's PyPI wheel is a CUDA build: its C++ ops do not load
against CPU torch, and its ``_meta_registrations`` then registers fake kernels for two ops that do
not exist ("operator torchvision::nms does not exist"). ``_torchvision_importable`` defines those
two schemas (as torchvision's csrc does) so that its Python part imports; the models here use none
of torchvision's C++ ops, and calling one raises torch's "no kernel" error, never a wrong result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

_KEEP: list[Any] = []  # the torch.library fragment must outlive the import


@dataclass
class Case:
    """One run: ``fn(*inputs)`` then ``fn(*extra)`` for each extra, compiled with ``backend``."""

    fn: Callable[..., Any]
    inputs: tuple[Any, ...]
    backend: str
    model: torch.nn.Module  # whose parameters and grads are compared with eager after the calls
    extra: tuple[tuple[Any, ...], ...] = field(default=())


def _torchvision_importable() -> None:
    """Let torchvision's Python part import on CPU torch when its CUDA-built C++ ops cannot load."""
    if _KEEP or hasattr(torch.ops.torchvision, "nms"):  # defined already (or the ops loaded)
        return
    lib = torch.library.Library("torchvision", "FRAGMENT")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _KEEP.append(lib)


def _timm(name: str, **kwargs: Any) -> torch.nn.Module:
    _torchvision_importable()
    import timm

    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, num_classes=4, **kwargs)


def vit() -> torch.nn.Module:
    """timm's ViT: one block, 32x32 images in 8x8 patches."""
    return _timm("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=1,
                 num_heads=2)


def resnet() -> torch.nn.Module:
    """timm's ResNet with one BasicBlock per stage (resnet18's blocks, a quarter of them)."""
    _torchvision_importable()
    from timm.models.resnet import BasicBlock, ResNet

    torch.manual_seed(0)
    return ResNet(block=BasicBlock, layers=(1, 1, 1, 1), num_classes=4)


def mobilenet() -> torch.nn.Module:
    return _timm("mobilenetv3_small_050")


def efficientnet() -> torch.nn.Module:
    """timm's TinyNet-E: EfficientNet-B0's blocks at 0.6 depth and 0.51 width."""
    return _timm("tinynet_e")


def _quiet() -> None:
    """Before any transformers import: torchvision importable (transformers imports it when
    installed), transformers' warnings off."""
    _torchvision_importable()
    from transformers.utils import logging

    logging.set_verbosity_error()


def gpt2() -> torch.nn.Module:
    """A one-layer GPT-2 (its loss calls a logger: a real graph break in transformers)."""
    _quiet()
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32,
                                      bos_token_id=0, eos_token_id=0, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0))


def bert() -> torch.nn.Module:
    _quiet()
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    return BertForMaskedLM(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=64, vocab_size=64,
                                      max_position_embeddings=32, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0))


def llama() -> torch.nn.Module:
    _quiet()
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                        num_key_value_heads=1, intermediate_size=64, vocab_size=64,
                                        max_position_embeddings=32))


VISION = {"vit": vit, "resnet": resnet, "mobilenetv3": mobilenet, "efficientnet": efficientnet}
LANGUAGE = {"gpt2": gpt2, "bert": bert, "llama": llama}


def _images(batch: int = 2, size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(batch)
    return torch.randn(batch, 3, size, size, generator=g), torch.arange(batch) % 4


# Batch norm over 2 images whose last feature maps are 1x1 normalises 2 values: its backward is so
# ill-conditioned that any change of summation order moves an SGD step by tens (measured: Inductor
# vs eager, MobileNetV3 weights off by 18 at batch 2 and 32x32, 3e-6 at batch 8 and 64x64;
# aot_eager matches exactly at both). Their training steps use a batch that keeps 2x2 maps.
WELL_CONDITIONED = {"mobilenetv3": (8, 64), "efficientnet": (8, 64)}


def _ids(batch: int = 2, length: int = 8) -> tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(length)
    return (torch.randint(0, 64, (batch, length), generator=g),)


def _loss(model: torch.nn.Module, lm: bool) -> Callable[..., torch.Tensor]:
    """The model's loss on one batch: its own LM loss for language models, cross entropy else."""
    if lm:
        return lambda ids: model(ids, labels=ids).loss
    return lambda x, y: torch.nn.functional.cross_entropy(model(x), y)


def vision_case(family: str, mode: str, backend: str = "inductor") -> Case:
    model = VISION[family]()
    data = _images(*WELL_CONDITIONED[family]) if mode == "train" and family in WELL_CONDITIONED else None
    return _case(model, mode, backend, lm=False, data=data)


def language_case(family: str, mode: str, backend: str = "inductor") -> Case:
    model = LANGUAGE[family]()
    return _case(model, mode, backend, lm=True)


def _case(model: torch.nn.Module, mode: str, backend: str, lm: bool,
          data: tuple[torch.Tensor, ...] | None = None) -> Case:
    data = data or (_ids() if lm else _images())
    loss_of = _loss(model, lm)
    if mode == "eval":
        model.eval()

        def infer(*batch):
            with torch.no_grad():  # grad mode off: one inference graph
                out = model(batch[0])
            return out.logits if lm else out

        return Case(infer, data[:1], backend, model)
    if mode == "fwd+bwd":
        def fwd_bwd(*batch):
            loss = loss_of(*batch)
            loss.backward()
            return loss.detach()

        return Case(fwd_bwd, data, backend, model)
    if mode == "train":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def train_step(*batch):
            opt.zero_grad()
            loss = loss_of(*batch)
            loss.backward()
            opt.step()
            return loss.detach()

        return Case(train_step, data, backend, model)
    if mode == "dynamic":  # a second size: Dynamo recompiles with a symbolic batch / sequence
        model.eval()

        def forward(*batch):
            out = model(batch[0])
            return out.logits if lm else out

        other = _ids(2, 12) if lm else _images(3)
        return Case(forward, data[:1], backend, model, extra=(other[:1],))
    if mode == "decode":
        model.eval()

        def greedy(ids):
            with torch.no_grad():
                out = model(ids, use_cache=True)
                tokens = [out.logits[:, -1].argmax(-1, keepdim=True)]
                for _ in range(2):  # 3 tokens in all, each step reads the KV cache
                    out = model(tokens[-1], past_key_values=out.past_key_values, use_cache=True)
                    tokens.append(out.logits[:, -1].argmax(-1, keepdim=True))
            return torch.cat(tokens, dim=1)

        return Case(greedy, data, backend, model)
    raise ValueError(f"unknown mode {mode!r}")


def _backend(mode: str) -> str:
    """Inductor for the training steps (the whole pipeline: joint graph, backward, optimizer,
    C++ kernels); aot_eager (Dynamo + AOTAutograd, no codegen) for the other modes, so that the
    sweep stays minutes, not an hour, on 2 cores: an Inductor case costs 1-7 min there."""
    return "inductor" if mode == "train" else "aot_eager"


def _sweep() -> dict[str, Callable[[], Case]]:
    cases: dict[str, Callable[[], Case]] = {}
    for family in VISION:
        modes = ("eval", "fwd+bwd", "train", "dynamic") if family in ("vit", "resnet") else (
            "eval", "train")
        for mode in modes:
            cases[f"{family} {mode}"] = lambda f=family, m=mode: vision_case(f, m, _backend(m))
    cases["resnet train (labkit)"] = lambda: vision_case("resnet", "train", "labkit")
    for family in LANGUAGE:
        modes = ("eval", "fwd+bwd", "train", "dynamic") + (("decode",) if family != "bert" else ())
        for mode in modes:
            cases[f"{family} {mode}"] = lambda f=family, m=mode: language_case(f, m, _backend(m))
    return cases


CASES = _sweep()
