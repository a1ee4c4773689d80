from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from sandbox.api import FunctionResult, RewardError, RewardErrorKind
from sandbox.redaction import SecretMask
from service.secrets import SecretsKeyError, check_secrets, seal, unseal
from service.settings import Settings


def test_sealed_with_a_key_file_created_on_first_use(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    token = seal({"JUDGE_KEY": "sk-123456"}, settings)
    assert token is not None and "sk-123456" not in token
    assert (tmp_path / "secrets.key").stat().st_mode & 0o077 == 0  # owner only
    assert unseal(token, Settings(state_dir=tmp_path)) == {"JUDGE_KEY": "sk-123456"}
    assert seal({}, settings) is None and unseal(None, settings) == {}


def test_another_key_cannot_open_them(tmp_path: Path) -> None:
    token = seal({"K": "value"}, Settings(state_dir=tmp_path))
    other = Settings(state_dir=tmp_path, secrets_key=Fernet.generate_key().decode())
    with pytest.raises(SecretsKeyError, match="same RFT_SECRETS_KEY"):
        unseal(token, other)
    with pytest.raises(SecretsKeyError, match="not a Fernet key"):
        seal({"K": "v"}, Settings(state_dir=tmp_path, secrets_key="short"))


def test_names_must_be_plain_and_not_reserved() -> None:
    assert check_secrets({"OPENAI_API_KEY": "x"}) == {"OPENAI_API_KEY": "x"}
    for bad in ({"A-B": "x"}, {"HOME": "x"}, {"K": "a\0b"}):
        with pytest.raises(ValueError):
            check_secrets(bad)


def test_mask_replaces_values_longest_first() -> None:
    mask = SecretMask({"SHORT": "abc", "KEY": "sk-123456", "LONGER": "sk-123456-extra"})
    assert mask.text("a sk-123456-extra and sk-123456, abc") == (
        "a [secret LONGER] and [secret KEY], abc"  # 3 characters: too short to mask
    )
    result = FunctionResult(
        name="f",
        version=1,
        scores=[None],
        errors=[RewardError(RewardErrorKind.EXCEPTION, "sk-123456", "tb sk-123456", 0)],
        logs="printed sk-123456",
    )
    masked = mask.result(result)
    assert masked.logs == "printed [secret KEY]"
    assert masked.errors[0].message == "[secret KEY]"
    assert masked.errors[0].traceback == "tb [secret KEY]"
