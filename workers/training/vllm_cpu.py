"""vLLM's CPU backend, made to accept TRL's weight sync. Applied only when vLLM runs on CPU.

Why this exists: after loading a model, vLLM's CPU backend repacks every linear layer's weight
for its own GEMM kernels (oneDNN or sgl-kernel) and replaces ``layer.weight`` with an empty
parameter. TRL's colocate mode copies the trainer's weights (base + merged LoRA) into vLLM
before each step's generation through ``model.load_weights``, which needs the original
parameters and their ``weight_loader``; on the repacked model the first sync fails with
``AttributeError: 'Parameter' object has no attribute 'weight_loader'``.

The fix: keep 2-D weights as plain parameters and compute those layers with
``torch.nn.functional.linear``, so each sync writes into the weights vLLM actually computes
with. Slower for big models than the packed kernels, and irrelevant for them: real models
train on GPUs, where vLLM has no such repacking and nothing here is ever applied.
(tests/vllm_generation/test_vllm_training.py checks that vLLM samples with the trained weights.)
"""

from __future__ import annotations

import functools
from typing import Any

import torch

_PATCHED_MARK = "_rft_keeps_plain_weights"


def keep_plain_linear_weights() -> None:
    """Patch vLLM (CPU build) so linear layers keep their weights unpacked. Idempotent.

    Must run before the engine loads the model (before GRPOTrainer is built). vLLM imports
    ``dispatch_cpu_unquantized_gemm`` from its module at each call, so patching the module's
    attribute reaches every layer loaded afterwards, in this process (colocate mode turns
    vLLM's engine subprocess off).
    """
    from vllm.model_executor.layers import utils
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        raise RuntimeError("keep_plain_linear_weights is for vLLM's CPU backend only")
    original = utils.dispatch_cpu_unquantized_gemm
    if getattr(original, _PATCHED_MARK, False):
        return

    @functools.wraps(original)
    def dispatch_keeping_weights(layer: torch.nn.Module, remove_weight: bool) -> Any:
        weight = getattr(layer, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.ndim == 2 and not weight.is_meta:
            layer.cpu_linear = torch.nn.functional.linear  # type: ignore[assignment]
            return None
        return original(layer, remove_weight)

    setattr(dispatch_keeping_weights, _PATCHED_MARK, True)
    utils.dispatch_cpu_unquantized_gemm = dispatch_keeping_weights
