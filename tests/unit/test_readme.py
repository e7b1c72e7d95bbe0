"""README.md stays true: its generated reference matches the code, its CI commands exist."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _update_readme_module() -> Any:
    path = REPO / "scripts" / "update_readme.py"
    spec = importlib.util.spec_from_file_location("update_readme", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_reference_is_current() -> None:
    module = _update_readme_module()
    text = (REPO / "README.md").read_text()
    assert module.render(text) == text, "README.md is stale: run scripts/update_readme.py"


def test_every_backend_has_its_options_documented() -> None:
    text = (REPO / "README.md").read_text()
    for backend in ("kubernetes", "kubernetes_mcad", "local_docker"):
        assert f"#### `{backend}`" in text
    assert "| `queue` | `str` | **required** |" in text


def test_ci_reads_three_commands_from_the_readme() -> None:
    text = (REPO / "README.md").read_text()
    for name in ("setup", "main-job", "test"):
        m = re.search(rf"<!-- ci: {name} -->\n```bash\n(.+)\n```", text)
        assert m, f"README.md has no command block for '{name}'"
        command = m.group(1)
        script = command.split()[1] if command.startswith("bash ") else None
        if script:
            assert (REPO / script).is_file(), f"{command!r} names a missing script"


def test_links_work_on_pypi() -> None:
    # PyPI shows README.md as the project description, where a relative link has no target.
    text = (REPO / "README.md").read_text()
    relative = [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if not re.match(r"(https?://|mailto:|#)", target)
    ]
    assert relative == [], f"make these links absolute (https://github.com/...): {relative}"
