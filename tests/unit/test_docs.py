"""The pages under docs/ stay true: their generated parts match the code, their code blocks
compile, every page is in the site's navigation, and what they list is what the code has.
The strict site build (``mkdocs build --strict``, run by CI) checks the links."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.S | re.M)


def test_generated_parts_are_current() -> None:
    module = _script("update_docs")
    for page in module.pages():
        text = (DOCS / page).read_text()
        assert module.render(page, text) == text, (
            f"docs/{page} is stale: run scripts/update_docs.py"
        )


def test_every_backend_has_its_options_documented() -> None:
    from torchx_provider.backends import BUILTIN_BACKENDS

    text = (DOCS / "backends.md").read_text()
    for backend in BUILTIN_BACKENDS:
        assert f"### `{backend.name}`" in text
    assert "| `queue` | `str` | **required** |" in text


def test_the_measured_tables_sit_in_their_pages() -> None:
    reliability = _script("reliability_table")
    assert reliability.PAGE == DOCS / "reliability.md"
    text = reliability.PAGE.read_text()
    assert reliability.START in text and reliability.END in text
    rbac = (DOCS / "rbac.md").read_text()
    assert "<!-- generated: permissions -->" in rbac
    assert "<!-- end generated: permissions -->" in rbac


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_compiles(page: Path) -> None:
    for i, source in enumerate(blocks(page.read_text(), "python")):
        compile(source, f"{page.name} block {i}", "exec")


@pytest.mark.parametrize("page", [*PAGES, REPO / "README.md"], ids=lambda p: p.name)
def test_every_shell_block_parses_and_its_yaml_and_json_load(page: Path) -> None:
    """``bash -n`` reads each shell block as bash would (quotes, heredocs, continuations);
    every YAML block loads."""
    import subprocess

    text = page.read_text()
    for i, source in enumerate(blocks(text, "bash")):
        checked = subprocess.run(["bash", "-n"], input=source, text=True, capture_output=True)
        assert checked.returncode == 0, f"{page.name} bash block {i}: {checked.stderr}"
    for source in blocks(text, "yaml"):
        yaml.safe_load(source)


def test_the_python_blocks_of_the_concept_and_resource_pages_run() -> None:
    """They build apps and roles only (no DAG, no backend), so they run as they are."""
    for name in ("concepts.md", "resources.md"):
        for source in blocks((DOCS / name).read_text(), "python"):
            exec(compile(source, name, "exec"), {})


def test_every_page_is_in_the_navigation_and_every_entry_exists() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    nav = {next(iter(entry.values())) for entry in config["nav"]}
    assert nav == {p.name for p in PAGES}


def test_every_macro_is_listed() -> None:
    from torchx_provider.specs import macros

    text = (DOCS / "concepts.md").read_text().split("## Macros", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `\$\{(\w+)\}` \|", text, re.M))
    assert listed == set(macros.NAMES)


def test_the_scheduler_messages_are_quoted_as_the_code_says_them() -> None:
    from torchx_provider.errors import InvalidOptionError
    from torchx_provider.operators import TorchXKubernetesOperator, TorchXOperator

    text = (DOCS / "troubleshooting.md").read_text()
    app = {"name": "a", "roles": [{"name": "r", "image": "i", "entrypoint": "e"}]}
    for make in (
        lambda: TorchXOperator(task_id="t", app=app),
        lambda: TorchXKubernetesOperator(task_id="t", app=app, scheduler="local_docker"),
    ):
        with pytest.raises(InvalidOptionError) as e:
            make()
        quoted = [q for q in re.findall(r"^\| `([^`]+?)…` \|", text, re.M) if q in str(e.value)]
        assert quoted, f"troubleshooting.md does not quote {str(e.value)[:60]!r}"


def test_the_support_section_says_what_ci_runs_on_each_declared_version() -> None:
    """Every entry of scripts/other_versions.sh is in "Supported versions", and each Python
    the package declares is either run by CI (the main one, or a ``+pyX.Y`` entry) or said
    there to be checked statically only or not run."""
    text = (DOCS / "install.md").read_text()
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
