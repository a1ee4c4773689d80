"""score_model graders judged by this server's own /v1/chat/completions (the opt-in judge
endpoint, RFT_GRADER_JUDGE_BASE_URL): graders.run reaches the judge through the reward
sandbox and reads its answer. A stack of its own, since the judge is set when the API starts."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from service.embedded import free_port
from service.stack import LocalStack

PROMPT = "Rate this answer from 0 to 1: {{sample.output_text}} (expected {{item.answer}})"


@pytest.fixture(scope="module")
def judged(stack: LocalStack) -> Iterator[openai.OpenAI]:
    # `stack` (the session's) is only asked for so that the usual test environment is set.
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from service.auth.service import KEY_PREFIX, ensure_api_key
    from service.db import to_sqlalchemy_url

    key = KEY_PREFIX + uuid.uuid4().hex
    port = free_port()
    state_dir = Path(tempfile.mkdtemp(prefix="rft-judge-"))
    try:
        with LocalStack(
            state_dir,
            api_port=port,
            workers=0,
            extra_env={
                "RFT_GRADER_JUDGE_BASE_URL": f"http://127.0.0.1:{port}/v1",
                "RFT_GRADER_JUDGE_API_KEY": key,
            },
        ) as running:
            engine = create_engine(to_sqlalchemy_url(running.database_url or ""))
            with Session(engine) as session, session.begin():
                ensure_api_key(session, "judge-tenant", key)
            engine.dispose()
            running.start_inference()
            yield openai.OpenAI(base_url=f"{running.base_url}/v1", api_key=key, max_retries=0)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def test_score_model_asks_our_own_chat_completions(judged: openai.OpenAI) -> None:
    grader: Any = {
        "type": "score_model",
        "name": "judge",
        "model": "rft-tiny",
        "input": [{"role": "user", "content": PROMPT}],
        "sampling_params": {"temperature": 0, "max_completions_tokens": 8},
    }
    assert judged.fine_tuning.alpha.graders.validate(grader=grader).grader is not None
    run = judged.fine_tuning.alpha.graders.run(
        grader=grader, model_sample="4", item={"answer": "4"}
    )
    # What the judge (greedy, so repeatable) says to the rendered prompt, asked directly.
    reply = judged.chat.completions.create(
        model="rft-tiny",
        messages=[{"role": "user", "content": "Rate this answer from 0 to 1: 4 (expected 4)"}],
        temperature=0,
        max_tokens=8,
    )
    said = reply.choices[0].message.content or ""
    errors = run.metadata.errors
    assert not errors.model_grader_server_error, errors.model_grader_server_error_details
    if errors.model_grader_parse_error:
        # The tiny model rarely writes a number: its words came back through the sandbox.
        assert repr(said.strip()[:200]) in (errors.model_grader_server_error_details or "")
        assert run.reward == 0.0
    else:
        assert 0.0 <= run.reward <= 1.0
