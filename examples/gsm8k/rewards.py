"""GSM8K rewards, as the GRPO tutorials write them: a format reward and a correctness reward
over completions that answer in <reasoning>...</reasoning><answer>...</answer>.

Sent whole as a reward module (docs/get-started/gsm8k.md): the server keeps, for each reward,
the module-level code it uses (the pattern, the helpers). Each function takes the batch (TRL)
form; `answer` is the dataset's column of that name. Completions are strings for string
prompts and [{"role": "assistant", "content": ...}] for chat prompts: both are handled.
"""

import re

STRICT_FORMAT = re.compile(r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n?$", re.S)


def completion_text(completion):
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"]


def extract_xml_answer(text):
    return text.split("<answer>")[-1].split("</answer>")[0].strip()


def correctness_reward_func(prompts, completions, answer, **kwargs):
    """1.0 when the <answer> is exactly the reference number."""
    extracted = [extract_xml_answer(completion_text(c)) for c in completions]
    return [
        1.0 if got == str(want).strip() else 0.0
        for got, want in zip(extracted, answer, strict=True)
    ]


def int_reward_func(prompts, completions, **kwargs):
    """1.0 when the <answer> is a whole number (the format GSM8K's answers have)."""
    extracted = [extract_xml_answer(completion_text(c)) for c in completions]
    return [1.0 if got.isdigit() else 0.0 for got in extracted]


def strict_format_reward_func(prompts, completions, **kwargs):
    """1.0 for exactly the reasoning-then-answer layout, line breaks included."""
    return [1.0 if STRICT_FORMAT.match(completion_text(c)) else 0.0 for c in completions]


def count_xml(text):
    score = 0.0
    if text.count("<reasoning>\n") == 1:
        score += 0.125
    if text.count("\n</reasoning>\n") == 1:
        score += 0.125
    if text.count("\n<answer>\n") == 1:
        score += 0.125
        score -= len(text.split("\n</answer>\n")[-1]) * 0.001
    if text.count("\n</answer>") == 1:
        score += 0.125
        score -= (len(text.split("\n</answer>")[-1]) - 1) * 0.001
    return score


def xmlcount_reward_func(prompts, completions, **kwargs):
    """Partial credit for each tag in place: a signal before the whole format is learnt."""
    return [count_xml(completion_text(c)) for c in completions]
