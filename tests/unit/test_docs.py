"""The pages under docs/ stay true: their generated parts match the code, their Python
examples run, their other code blocks parse, every page is in the site's navigation, and what
they list is what the code has. The strict site build (``mkdocs build --strict``, run by CI)
checks the links."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from doc_blocks import blocks, run_python

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
#: every Python block of the pages: (page, its index on the page)
PYTHON_BLOCKS = [
    (page, i) for page in PAGES for i, _ in enumerate(blocks(page.read_text(), "python"))
]


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


@pytest.mark.parametrize(
    ("page", "index"), PYTHON_BLOCKS, ids=[f"{p.name}-{i}" for p, i in PYTHON_BLOCKS]
)
def test_every_python_block_runs(page: Path, index: int) -> None:
    """Each block runs on its own, in a fresh namespace, inside a DAG (see
    :func:`doc_blocks.run_python`): a name it uses without importing it fails here. The app
    of every operator it builds resolves as the task would resolve it."""
    import airflow.sdk

    from torchx_provider.operators.app_source import resolve_app

    source = blocks(page.read_text(), "python")[index]
    if "torchx_provider.retry" in source and not hasattr(airflow.sdk, "ExceptionRetryPolicy"):
        pytest.skip("Airflow before 3.3 has no retry policies (the page says so)")
    dag = run_python(source, f"{page.name} block {index}")
    for task in dag.tasks:
        assert resolve_app(task.app, task.app_args, task.app_name).roles


def test_the_pages_with_operators_have_their_examples_run() -> None:
    assert {"concepts.md", "operator.md", "resources.md"} <= {p.name for p, _ in PYTHON_BLOCKS}


def test_an_example_that_leaves_out_an_import_fails(tmp_path: Path) -> None:
    """The check of :func:`test_every_python_block_runs`, on a page whose second block uses
    what only its first imported: blocks do not share names, so the second fails; with its
    import it runs and builds its operator."""
    page = tmp_path / "example.md"
    page.write_text(
        "```python\n"
        "from torchx_provider.operators import TorchXKubernetesOperator\n"
        "```\n\n"
        "```python\n"
        "from datetime import timedelta\n\n"
        'TorchXKubernetesOperator(task_id="train", app="dist.ddp", queue_timeout=timedelta(1))\n'
        "```\n"
    )
    first, second = blocks(page.read_text(), "python")
    run_python(first, "example.md block 0")
    with pytest.raises(NameError, match="TorchXKubernetesOperator"):
        run_python(second, "example.md block 1")
    dag = run_python(first + second, "example.md blocks 0 and 1")
    assert [t.task_id for t in dag.tasks] == ["train"]


@pytest.mark.parametrize("page", [*PAGES, REPO / "README.md"], ids=lambda p: p.name)
def test_every_shell_block_parses_and_its_yaml_and_json_load(page: Path) -> None:
    """``bash -n`` reads each shell block as bash would (quotes, heredocs, continuations);
    every YAML block loads (a block may hold several documents, as ``kubectl apply`` takes)."""
    import subprocess

    text = page.read_text()
    for i, source in enumerate(blocks(text, "bash")):
        checked = subprocess.run(["bash", "-n"], input=source, text=True, capture_output=True)
        assert checked.returncode == 0, f"{page.name} bash block {i}: {checked.stderr}"
    for source in blocks(text, "yaml"):
        list(yaml.safe_load_all(source))


class _MkDocsConfigLoader(yaml.SafeLoader):
    """A safe loader that reads ``!!python/name:...`` (a function mkdocs.yml names, as the
    Mermaid fence's formatter) as its name, without importing it."""


_MkDocsConfigLoader.add_multi_constructor(
    "tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix
)


def test_every_page_is_in_the_navigation_and_every_entry_exists() -> None:
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_MkDocsConfigLoader)
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


def test_the_diagrams_are_drawn_by_the_sites_own_mermaid() -> None:
    """The ``mermaid`` fence is configured, the hook that adds Mermaid to the site is named,
    and the page script it serves is the one ``extra_javascript`` lists: the diagrams render
    without a CDN. The tarball's check is npm's integrity string."""
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_MkDocsConfigLoader)
    mermaid = _script("docs_mermaid")
    fences = next(
        e["pymdownx.superfences"]["custom_fences"]
        for e in config["markdown_extensions"]
        if isinstance(e, dict) and "pymdownx.superfences" in e
    )
    assert {"name": "mermaid", "class": "mermaid"}.items() <= fences[0].items()
    assert "scripts/docs_mermaid.py" in config["hooks"]
    assert config["extra_javascript"] == [mermaid.SITE_PATH]
    assert mermaid.integrity(b"") == (
        "sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg=="
    )
    drawn = [p.name for p in PAGES if blocks(p.read_text(), "mermaid")]
    assert {"concepts.md", "operator.md"} <= set(drawn)


def test_the_api_reference_shows_sphinx_markup_as_markdown() -> None:
    pytest.importorskip("griffe")
    api = _script("docs_api")
    assert api.markdown_of(":class:`~torchx_provider.errors.UserCodeError`") == "`UserCodeError`"
    assert api.markdown_of(":func:`torchx_provider.retry.retry_infrastructure_only`") == (
        "`torchx_provider.retry.retry_infrastructure_only`"
    )
    assert api.markdown_of(":mod:`the trigger <torchx_provider.triggers.job>`") == "`the trigger`"
    assert api.markdown_of("The tree::\n\n    a\n") == "The tree:\n\n    a\n"
    text = "An example.\n\n>>> 1 + 1\n2\n\nAfter it."
    assert api.markdown_of(text) == "An example.\n\n```pycon\n>>> 1 + 1\n2\n```\n\nAfter it."
