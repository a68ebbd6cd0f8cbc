"""Real models from transformers, random init, small configs: the cases of the slow model suite.

No weights are downloaded: every model is built from a config. transformers is optional (the
``models`` extra); each case builder raises ImportError without it, and the tests skip. timm is not
used: it imports torchvision, whose PyPI wheel is a CUDA build that does not load against CPU torch;
transformers' own ResNet stands in for the CNN.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Case = tuple[Callable[..., Any], tuple[Any, ...], str]  # fn, inputs, backend


def _quiet() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()


def gpt2(n_layer: int = 1) -> Any:
    """A small GPT-2 language model (its loss calls a logger: a real graph break in transformers)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    _quiet()
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=n_layer, n_embd=32, n_head=2, vocab_size=64,
                                      n_positions=32, bos_token_id=0, eos_token_id=0))


def gpt2_train() -> Case:
    model = gpt2()

    def train_step(ids):
        loss = model(ids, labels=ids).loss
        loss.backward()
        return loss

    return train_step, (torch.randint(0, 64, (2, 8)),), "aot_eager"


def bert_eval() -> Case:
    """BERT under torch.no_grad(): grad mode off, one inference graph."""
    from transformers import BertConfig, BertModel

    _quiet()
    torch.manual_seed(0)
    model = BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64, vocab_size=64, max_position_embeddings=32))
    model.eval()

    def encode(ids):
        with torch.no_grad():
            return model(ids).last_hidden_state

    return encode, (torch.randint(0, 64, (2, 8)),), "aot_eager"


def llama_forward() -> Case:
    from transformers import LlamaConfig, LlamaForCausalLM

    _quiet()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1,
                                         intermediate_size=64, vocab_size=64,
                                         max_position_embeddings=32))

    def logits(ids):
        return model(ids).logits

    return logits, (torch.randint(0, 64, (1, 8)),), "aot_eager"


def resnet(backend: str = "inductor") -> Case:
    """A small ResNet (transformers' own: no torchvision), a training step with the loss."""
    from transformers import ResNetConfig, ResNetForImageClassification

    _quiet()
    torch.manual_seed(0)
    model = ResNetForImageClassification(ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", num_labels=4))

    def train_step(x, y):
        loss = torch.nn.functional.cross_entropy(model(x).logits, y)
        loss.backward()
        return loss

    return train_step, (torch.randn(2, 3, 32, 32), torch.tensor([1, 2])), backend


CASES: dict[str, Callable[[], Case]] = {
    "gpt2 train (aot_eager)": gpt2_train,
    "bert eval, no_grad (aot_eager)": bert_eval,
    "llama forward (aot_eager)": llama_forward,
    "resnet train (inductor)": resnet,
    "resnet train (labkit)": lambda: resnet("labkit"),
}
