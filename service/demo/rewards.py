"""Demo reward functions, in the per-sample form users upload: f(prompt, completion, example)."""


def letter_fraction(prompt, completion, example):
    """The fraction of the completion's characters equal to the row's target letter."""
    if not completion:
        return 0.0
    target = example["target_letter"]
    return sum(1 for ch in completion if ch == target) / len(completion)


def brevity(prompt, completion, example):
    """1.0 for an empty completion, falling linearly to 0.0 at 64 characters."""
    return max(0.0, 1.0 - len(completion) / 64)
