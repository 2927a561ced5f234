"""The README says what is true: its example runs, and its test command is the one CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_python_example_runs():
    example = re.findall(r"```python\n(.*?)```", README, re.S)[0]  # the first: using attention
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    assert namespace["C"].shape == (6, 2) and namespace["A"].shape == (6, 6)
    assert namespace["Wq"].shape == (3, 2)


def test_the_test_command_is_what_ci_runs():
    commands = re.findall(r"```sh\n(.*?)\n```", README, re.S)
    test_command = next(c for c in commands if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command.strip() in ci
