"""A reward that runs code: the dataset's tests, with pytest, on the completion.

docs/guides/code-execution.md ("Rewards that run code") shows exactly this source (tests/api/
test_reward_functions.py checks that it does); the sandbox, API and integration tests run it.
"""

from __future__ import annotations

PASSES_TESTS = """\
import os
import subprocess
import tempfile


def passes_tests(prompt, completion, example):
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "solution.py"), "w") as file:
            file.write(completion)
        with open(os.path.join(folder, "test_solution.py"), "w") as file:
            file.write(example["tests"])
        try:
            run = subprocess.run(
                ["python", "-m", "pytest", "-q", folder], capture_output=True, timeout=10
            )
        except subprocess.TimeoutExpired:
            return 0.0  # an endless loop is a wrong answer
        if b"No module named pytest" in run.stderr:
            raise RuntimeError("pytest is missing: add it to the job's runtime_packages")
        return 1.0 if run.returncode == 0 else 0.0
"""

# Tests of a dataset row, and a right and a wrong answer to them.
TESTS = "from solution import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"

# The tiny test model writes no code: jobs test the row's own `solution` column instead, with
# the completion appended as a comment, so that every score is known in advance.
FIXED_CANDIDATE = PASSES_TESTS.replace(
    "file.write(completion)", "file.write(example['solution'] + '\\n# ' + repr(completion))"
)
assert FIXED_CANDIDATE != PASSES_TESTS
