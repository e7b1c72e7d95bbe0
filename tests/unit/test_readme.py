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


def test_the_support_section_says_what_ci_runs_on_each_declared_version() -> None:
    """Every entry of scripts/other_versions.sh is in "Supported versions", and each Python
    the package declares is either run by CI (the main one, or a ``+pyX.Y`` entry) or said
    there to be checked statically only or not run."""
    import tomllib

    text = (REPO / "README.md").read_text()
    section = text.split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    script = (REPO / "scripts" / "other_versions.sh").read_text()
    m = re.search(r'OTHER_VERSIONS="\$\{OTHER_VERSIONS:-([^}]*)\}"', script)
    assert m, "scripts/other_versions.sh no longer sets OTHER_VERSIONS"
    main = re.search(r"CI runs everything on\s+Python (3\.\d+)", section)
    assert main, "the section does not say which Python CI runs everything on"
    run = {main.group(1)}
    for entry in m.group(1).split():
        airflow, *tags = entry.split("+")
        assert airflow in section, f"{entry}: Airflow {airflow} is not in the section"
        for tag in tags:
            if tag.startswith("py"):
                assert re.search(rf"Python\s+{re.escape(tag[2:])}\b", section), entry
                run.add(tag[2:])
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {
        c.rsplit(" :: ", 1)[1]
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    for python in sorted(declared - run):
        said = rf"{re.escape(python)}\s+is\s+(checked statically only|not run)"
        assert re.search(said, section), f"Python {python} is declared, neither run nor said so"
