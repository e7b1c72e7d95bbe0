"""README.md stays true: its DAGs build, its CI commands exist, its links work on PyPI and
GitHub."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from doc_blocks import blocks

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS_URL = "https://github.com/airflow-provider-torchx/airflow-provider-torchx/blob/main/docs/"


def slug(heading: str) -> str:
    """The anchor GitHub and MkDocs give a heading (lower case, punctuation dropped, spaces
    as dashes).

    >>> slug("GPUs, resources and pod overlays")
    'gpus-resources-and-pod-overlays'
    """
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_ci_reads_three_commands_from_the_contributors_section() -> None:
    text = README.read_text()
    section = text.split("## For contributors and CI", 1)[1]
    for name in ("setup", "main-job", "test"):
        m = re.search(rf"<!-- ci: {name} -->\n```bash\n(.+)\n```", section)
        assert m, f"README.md's contributors section has no command block for '{name}'"
        command = m.group(1)
        script = command.split()[1] if command.startswith("bash ") else None
        if script:
            assert (REPO / script).is_file(), f"{command!r} names a missing script"


def test_links_work_on_pypi() -> None:
    # PyPI shows README.md as the project description, where a relative link has no target.
    text = README.read_text()
    relative = [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if not re.match(r"(https?://|mailto:|#)", target)
    ]
    assert relative == [], f"make these links absolute (https://github.com/...): {relative}"


def test_links_to_the_docs_name_pages_and_headings_that_exist() -> None:
    # (an image's link ends with ``?raw=true``: the file itself)
    links = re.findall(
        rf"\]\({re.escape(DOCS_URL)}([^)#?\s]+)(?:\?raw=true)?(?:#([^)\s]+))?\)", README.read_text()
    )
    assert links, "README.md links to no documentation page"
    for page, anchor in links:
        path = REPO / "docs" / page
        assert path.is_file(), f"README.md links to docs/{page}, which does not exist"
        if anchor:
            assert anchor in anchors(path), f"docs/{page} has no heading #{anchor}"


def readme_dags(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The DAGs the README's Python blocks make, built as a DAG file builds them (each block
    run on its own, in a fresh namespace: a name a block uses without importing it fails; a
    ``with DAG(...)`` block binds no name, so the DAGs are caught as their blocks close)."""
    from airflow.sdk import DAG

    monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", raising=False)
    made: list[Any] = []
    real_exit = DAG.__exit__

    def keep(self: Any, *args: Any) -> Any:
        made.append(self)
        return real_exit(self, *args)

    monkeypatch.setattr(DAG, "__exit__", keep)
    for source in blocks(README.read_text(), "python"):
        exec(compile(source, "README.md", "exec"), {})
    return made


#: what the README's templates render to here
RENDERED = {"{{ params.image }}": "registry.example.com/ml/train:1.4"}
#: the example DAG the README shows as its first DAG on Kubernetes, from ``import pendulum`` on
KUBERNETES_EXAMPLE = REPO / "dags_examples" / "torchx_train_ddp.py"


def test_every_dag_builds_and_the_app_of_every_task_resolves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The app of each task is resolved the way the task resolves it (templates rendered):
    a component argument that does not fit its signature, or an invalid app, fails here."""
    from torchx_provider.operators import TorchXOperator
    from torchx_provider.operators.app_source import resolve_app

    dags = readme_dags(monkeypatch)
    assert len(dags) >= 2, "README.md should show a DAG on Docker and one on Kubernetes"
    for dag in dags:
        for task in dag.tasks:
            assert isinstance(task, TorchXOperator)
            args = {k: RENDERED.get(v, v) for k, v in (task.app_args or {}).items()}
            assert resolve_app(task.app, args, task.app_name).roles


def test_the_readme_dags_are_what_they_say(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Docker DAG echoes from two replicas and is not deferred by default; the Kubernetes
    DAG runs 2 nodes of 4 processes, asks each for 4 GPUs, and defers."""
    from torchx_provider.operators.app_source import resolve_app

    hello, train = (dag.tasks[0] for dag in readme_dags(monkeypatch)[:2])
    assert (hello.scheduler, train.scheduler) == ("local_docker", "kubernetes")
    role = resolve_app(hello.app, hello.app_args).roles[0]
    assert (role.name, role.num_replicas) == ("echo", 2)
    assert hello.following.deferrable is False  # [operators] default_deferrable, unset
    args = {k: RENDERED.get(v, v) for k, v in train.app_args.items()}
    role = resolve_app(train.app, args).roles[0]
    assert (role.num_replicas, role.resource.gpu) == (2, 4)
    assert "--nnodes 2 --nproc_per_node 4 " in role.args[-1]  # sh -c "torchrun ..."
    assert train.following.deferrable is True
    # a 4-GPU node gets memory and CPUs of its size, not the component's 1 GiB and 2 CPUs
    assert role.resource.memMB >= 16 * 1024 and role.resource.cpu >= 8
    # the run options (queue, namespace) are the connection's, which a cfg would override
    assert not train.cfg
    # the image is a DAG param with a default, so the template renders in every run
    assert train.dag.params["image"]


def test_the_kubernetes_dag_is_the_example_dag_ci_parses() -> None:
    """The README's Kubernetes DAG is dags_examples/torchx_train_ddp.py (from its imports
    on), which the example DAG tiers parse."""
    source = KUBERNETES_EXAMPLE.read_text()
    body = source[source.index("\nimport pendulum\n") + 1 :]
    assert body in blocks(README.read_text(), "python"), (
        "README.md's first DAG on Kubernetes differs from dags_examples/torchx_train_ddp.py"
    )


def test_the_task_log_excerpt_is_found_in_a_log_that_says_it() -> None:
    """scripts/task_log_excerpt.py (CI runs it on the main job's log) reads the README's
    excerpt, and finds it in a log of the same lines with other ids and Airflow's prefixes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "task_log_excerpt", REPO / "scripts" / "task_log_excerpt.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lines = module.excerpt(README.read_text())
    assert any(line.startswith("[echo/0] hello from replica 0") for line in lines)
    other_run = "\n".join(
        f"2026-01-01T00:00:00Z [info     ] {line} [airflow.task] loc=x.py:1" for line in lines
    )
    other_run = other_run.replace("manual__2026-11-27T16:01:39.559833+00:00", "manual__x")
    other_run = re.sub(r"echo-[a-z0-9]{8}", "echo-abcd1234", other_run)
    assert module.missing(lines, other_run) == []
    assert module.missing(lines, other_run.replace("[echo/1]", "[echo/2]")) != []
