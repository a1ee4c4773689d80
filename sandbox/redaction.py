"""Masks a job's secret values in what its reward code prints or raises.

A judge function that prints its request, or an exception that echoes a header, would
otherwise put an API key into stored logs, error records and HTTP responses.
"""

from __future__ import annotations

from dataclasses import replace

from sandbox.api import FunctionResult

# Shorter values (a "1", a "true") would mask ordinary output, and are not secrets anyway.
MIN_MASKED_LENGTH = 6


class SecretMask:
    def __init__(self, env: dict[str, str]) -> None:
        # Longest first: a secret that contains another is masked whole.
        self._values = sorted(
            ((value, name) for name, value in env.items() if len(value) >= MIN_MASKED_LENGTH),
            key=lambda item: len(item[0]),
            reverse=True,
        )

    def __bool__(self) -> bool:
        return bool(self._values)

    def text(self, text: str) -> str:
        for value, name in self._values:
            if value in text:
                text = text.replace(value, f"[secret {name}]")
        return text

    def result(self, result: FunctionResult) -> FunctionResult:
        if not self._values:
            return result
        return replace(
            result,
            logs=self.text(result.logs),
            errors=[
                replace(
                    error,
                    message=self.text(error.message),
                    traceback=None if error.traceback is None else self.text(error.traceback),
                )
                for error in result.errors
            ],
        )
