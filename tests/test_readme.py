"""The README's Python snippets run as written."""

import re

import pytest

from tests.conftest import REPO_ROOT

SNIPPETS = re.findall(r"```python\n(.*?)```", (REPO_ROOT / "README.md").read_text(), re.S)


def test_readme_has_snippets():
    assert len(SNIPPETS) >= 3


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = SNIPPETS[index].replace("/tmp/odet-demo-model", str(tmp_path / "model"))
    exec(compile(code, f"README.md snippet {index}", "exec"), {})
