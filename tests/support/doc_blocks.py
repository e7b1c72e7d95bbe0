"""The fenced code blocks of a Markdown page (README.md, docs/*.md), and how a Python one is
run to check it: as a DAG file runs, so that a name the example uses without importing or
defining it fails."""

from __future__ import annotations

import re
from typing import Any


def blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of ``language`` in ``text``, in order.

    >>> blocks("a\\n```python\\nx = 1\\n```\\n```bash\\nls\\n```\\n", "python")
    ['x = 1\\n']
    """
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.S | re.M)


def run_python(source: str, name: str) -> Any:
    """Run the Python block ``source`` (``name`` says where it is, for tracebacks) and return
    the DAG that holds the tasks it built outside a DAG of its own.

    Each block runs on its own, in a fresh namespace: an example must import what it uses, as
    a reader's DAG file would. It runs inside a ``with DAG(...)``, as a task of a DAG file is
    built, so an example may build operators bare; building them resolves every name and
    checks every argument the operator checks at parse time, and nothing is submitted (no
    block needs a cluster or an engine to be built). A block that opens its own ``with
    DAG(...)`` keeps its tasks in that DAG."""
    from airflow.sdk import DAG

    with DAG(dag_id=re.sub(r"\W+", "_", name), schedule=None) as dag:
        exec(compile(source, name, "exec"), {"__name__": "__doc_example__"})
    return dag
