"""An adapter merged into its base model (workers.training.merge): a plain transformers model
folder in safetensors whose outputs are the base model's with the adapter applied."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from service.base_models.built_in.tiny_model import ensure_tiny_model
from workers.export import Progress, run_merge
from workers.failures import ExportFailure
from workers.training.merge import merge_adapter

PROMPTS = ["Write about cats:", "<|im_start|>user\nSay a word<|im_end|>\n"]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_tiny_model(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def adapter_dir(base_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter on every linear layer, as jobs train them, with random A and B: a trained
    adapter's B starts at zero and moves little in a few steps, and the merge must be exact
    for any weights (tests/integration/test_exports.py merges a trained one)."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)
    adapter = tmp_path_factory.mktemp("adapter")
    get_peft_model(model, config).save_pretrained(adapter)
    return adapter


def logits(model: torch.nn.Module, tokenizer_dir: Path) -> torch.Tensor:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    with torch.no_grad():
        return torch.cat(
            [
                model(**tokenizer(prompt, return_tensors="pt")).logits[0].float()
                for prompt in PROMPTS
            ]
        )


def test_the_merged_model_answers_as_base_plus_adapter(
    base_dir: Path, adapter_dir: Path, tmp_path: Path
) -> None:
    stages: list[str] = []
    merge_adapter(str(base_dir), adapter_dir, tmp_path / "merged", report=stages.append)
    assert stages == ["loading", "merging", "saving"]

    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert not any("lora" in name for name, _ in merged.named_parameters())
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    base_logits = logits(base, base_dir)
    adapted = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    expected = logits(adapted, base_dir)
    got = logits(merged.eval(), tmp_path / "merged")
    # fp32: the merge only reorders the sums (W x + B A x vs (W + B A) x).
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert (expected - base_logits).abs().max() > 0.1  # the adapter changes the answers
    assert merged.dtype == torch.float32  # the base model's own dtype ("auto")
    assert sorted(p.name for p in (tmp_path / "merged").glob("*.safetensors")) == [
        "model.safetensors"
    ]
    assert (tmp_path / "merged" / "tokenizer_config.json").is_file()


def test_a_bfloat16_merge_saves_bfloat16_weights_within_its_rounding(
    base_dir: Path, adapter_dir: Path, tmp_path: Path
) -> None:
    merge_adapter(str(base_dir), adapter_dir, tmp_path / "merged", dtype="bfloat16")
    with safe_open(str(tmp_path / "merged" / "model.safetensors"), "pt") as weights:
        dtypes = {weights.get_tensor(name).dtype for name in weights.keys()}  # noqa: SIM118
    assert dtypes == {torch.bfloat16}
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    expected = logits(PeftModel.from_pretrained(base, str(adapter_dir)).eval(), base_dir)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32)
    got = logits(merged.eval(), tmp_path / "merged")
    # bf16 keeps 8 bits of mantissa: ~0.4 % per weight, summed over two layers.
    assert (got - expected).abs().max() < 0.05 * expected.abs().max()


class Stages(Progress):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def stage(self, stage: object, share: float = 0.0) -> None:
        self.seen.append(str(stage))


def test_a_merge_that_fails_in_its_process_says_why(base_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "adapter").mkdir()
    progress = Stages()
    with pytest.raises(ExportFailure, match=r"^the merge failed: .*adapter_config\.json"):
        run_merge(str(base_dir), tmp_path / "adapter", tmp_path / "merged", "auto", progress)
    assert progress.seen == ["loading"]
