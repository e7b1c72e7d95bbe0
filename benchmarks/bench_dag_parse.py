"""What a DAG file of many TorchX tasks costs the dag-processor, next to the same DAG of
``EmptyOperator`` s and of ``KubernetesPodOperator`` s.

The dag-processor parses every DAG file again and again (every ``min_file_process_interval``),
so whatever a task costs to build is paid continuously, per task, by every deployment with
large sweeps. Three DAG files of ``--tasks`` tasks each are written to a temporary folder,
each with one DAG ``param`` (the namespace, templated into the tasks):

* ``EmptyOperator(task_id=...)``: the floor, the cheapest task Airflow has;
* ``TorchXKubernetesOperator``: one ``dist.ddp`` job per hyperparameter set, as a sweep is
  written (``app="dist.ddp"``, ``app_args`` with ``j``, ``script``, ``image`` and the
  set's ``script_args``, a ``cfg`` with the templated namespace, ``conn_id``;
  ``deferrable`` left to the Airflow setting, as most DAGs leave it);
* ``KubernetesPodOperator`` with the same image, command and namespace (when the
  ``cncf.kubernetes`` provider is installed; skipped with the reason printed otherwise).

Two measurements, both of what the processor does with a file -- ``DagBag(dag_folder=file)``
(``parse``: the file executed as a new module, every operator built and its arguments
checked, the DAG checked and bagged), then ``DagSerialization.to_dict(dag)`` (``serialize``,
to send the DAG to the database):

* **modules imported** (the goal's measurement: the tasks themselves): in this process, with
  every module the files import already imported, so that only the file's execution is
  timed. Executing a file in a fresh interpreter would time the imports of Airflow itself,
  which dwarf the tasks and are paid once per process, not per parse.
* **as the dag-processor**: Airflow 3.3's processor forks one child per parse from its
  manager, which pre-imports only the ``airflow.*`` modules a file imports
  (``[dag_processor] parsing_pre_import_modules``). A provider outside the ``airflow``
  namespace, such as this one, is therefore imported anew by every parse, while
  ``EmptyOperator``'s and ``KubernetesPodOperator``'s modules are inherited from the
  manager. A manager process made the same way (Airflow's own ``iter_airflow_imports`` on
  each file) forks a child per timed parse, which times the same two steps.

Python caches a file's bytecode and recompiles only when the file changed, so the timed
parses load cached bytecode (kept in a temporary folder of the benchmark's own); the
``compile`` column is compiling the file's text, which a deployment running with
``PYTHONDONTWRITEBYTECODE`` pays on every parse too -- a cost of the text the author wrote,
not of the operator.

The clock is the CPU time of the timing thread (``--clock wall`` for wall time): on a shared
machine, wall time mostly measures the wait for a CPU. Rounds interleave the files (in a
rotating order) after one untimed warm-up each, and each timing starts after a
``gc.collect()``; the report gives medians and minimums in milliseconds and each file's
ratios to the ``EmptyOperator`` file, from medians of the same run. The machine-readable last
line gives the parse ratio with modules imported (the goal: at most ``--goal``, 1.5 by
default; the script exits non-zero when it is missed), then with the serialization, then the
parse ratio as the dag-processor, then KubernetesPodOperator's parse ratio::

    tasks=N ratio_vs_empty=R with_serialize=S as_processor=P kpo_ratio_vs_empty=K

Usage::

    python benchmarks/bench_dag_parse.py [--tasks 200] [--rounds 15] [--no-kpo] [--goal 1.5]
        [--clock cpu|wall]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "provider"))

HEAD = '''"""{what}: {tasks} tasks."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

{imports}

with DAG(
    dag_id="{dag_id}",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={{"namespace": "ml"}},
):
'''

TORCHX_TASK = """    TorchXKubernetesOperator(
        task_id="train_{i}",
        app="dist.ddp",
        app_args={{
            "j": "2x2",
            "script": "train.py",
            "image": "ghcr.io/org/train:1.0",
            "script_args": ["--lr", "{lr}", "--batch", "{batch}"],
        }},
        cfg={{"queue": "default", "namespace": "{{{{ params.namespace }}}}"}},
        conn_id="torchx_kubernetes_default",
    )
"""

KPO_TASK = """    KubernetesPodOperator(
        task_id="train_{i}",
        name="train-{i}",
        namespace="{{{{ params.namespace }}}}",
        image="ghcr.io/org/train:1.0",
        cmds=["torchrun"],
        arguments=["--nnodes", "1", "--nproc-per-node", "2", "train.py", "--lr", "{lr}",
                   "--batch", "{batch}"],
        kubernetes_conn_id="kubernetes_default",
    )
"""

EMPTY_TASK = """    EmptyOperator(task_id="train_{i}")
"""

KINDS: dict[str, tuple[str, str, str]] = {
    # name: (import line, task template, the operator's module)
    "EmptyOperator": (
        "from airflow.providers.standard.operators.empty import EmptyOperator",
        EMPTY_TASK,
        "airflow.providers.standard.operators.empty",
    ),
    "TorchXKubernetesOperator": (
        "from torchx_provider.operators import TorchXKubernetesOperator",
        TORCHX_TASK,
        "torchx_provider.operators",
    ),
    "KubernetesPodOperator": (
        "from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator",
        KPO_TASK,
        "airflow.providers.cncf.kubernetes.operators.pod",
    ),
}


def dag_text(kind: str, tasks: int) -> str:
    imports, task, _ = KINDS[kind]
    text = HEAD.format(what=kind, tasks=tasks, imports=imports, dag_id=f"sweep_{kind.lower()}")
    for i in range(tasks):
        text += task.format(i=i, lr=f"{0.1 / (1 + i):.6f}", batch=16 << (i % 4))
    return text


#: the clock: CPU time of this thread (the default), or wall time (``--clock wall``)
CLOCK = time.thread_time


def parse_and_serialize(path: Path, tasks: int) -> tuple[float, float]:
    """One ``DagBag`` of ``path`` (checked to hold every task), then its DAG serialized:
    the seconds of each."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    gc.collect()
    start = CLOCK()
    bag = DagBag(dag_folder=str(path), load_op_links=False)
    parsed = CLOCK()
    if bag.import_errors or len(bag.dags) != 1:
        raise RuntimeError(f"{path.name} did not parse: {bag.import_errors}")
    (dag,) = bag.dags.values()
    if len(dag.tasks) != tasks:
        raise RuntimeError(f"{path.name}: {len(dag.tasks)} tasks, expected {tasks}")
    gc.collect()
    start_serialize = CLOCK()
    DagSerialization.to_dict(dag)
    return parsed - start, CLOCK() - start_serialize


def compile_time(path: Path) -> float:
    text = path.read_text()
    gc.collect()
    start = CLOCK()
    compile(text, str(path), "exec")
    return CLOCK() - start


def cache_bytecode(folder: Path) -> None:
    """Cache the bytecode of what is imported from now on (the DAG files; the provider's
    modules in the manager) in ``folder``, as Python does by default in ``__pycache__``."""
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(folder)


def rotations(kinds: list[str], rounds: int) -> list[list[str]]:
    return [kinds[r % len(kinds) :] + kinds[: r % len(kinds)] for r in range(rounds)]


def in_forked_child(path: Path, tasks: int) -> tuple[float, float]:
    """:func:`parse_and_serialize` in a child forked from this process, as the processor's
    manager runs each parse."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: time, report, leave without any clean-up
        os.close(read_end)
        try:
            result = json.dumps(parse_and_serialize(path, tasks))
        except BaseException as e:
            result = json.dumps({"error": repr(e)})
        os.write(write_end, result.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        answer = json.loads(pipe.read() or '{"error": "no answer"}')
    os.waitpid(pid, 0)
    if isinstance(answer, dict):
        raise RuntimeError(f"{path.name}: {answer['error']}")
    return answer[0], answer[1]


def manager(work: Path, tasks: int, rounds: int, kinds: list[str]) -> None:
    """The ``as the dag-processor`` measurement, in a process of its own (``--manager``): it
    imports what the processor's manager has imported, then forks a child per parse. Prints
    one JSON object: kind -> [[parse, serialize], ...]."""
    import airflow.dag_processing.dagbag
    import airflow.serialization.serialized_objects  # noqa: F401

    try:
        from airflow.utils.file import iter_airflow_imports
    except ImportError:  # not in this Airflow: only Airflow itself is pre-imported

        def iter_airflow_imports(file_path: str) -> list[str]:  # type: ignore[misc]
            return []

    files = {kind: work / f"sweep_{kind.lower()}.py" for kind in kinds}
    for path in files.values():  # as _pre_import_airflow_modules does before each fork
        for module in iter_airflow_imports(str(path)):
            importlib.import_module(module)
    leaked = sorted(m for m in sys.modules if m.startswith("torchx_provider.operators"))
    if leaked:
        raise RuntimeError(f"the manager must not import the operators: {leaked}")
    cache_bytecode(work / "pycache")
    for kind in kinds:  # warm-up: bytecode written
        in_forked_child(files[kind], tasks)
    samples: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    for order in rotations(kinds, rounds):
        for kind in order:
            samples[kind].append(in_forked_child(files[kind], tasks))
    print(json.dumps(samples))


def as_processor(work: Path, args: argparse.Namespace, kinds: list[str]) -> dict[str, Any]:
    """Run :func:`manager` in a fresh interpreter; its samples, or ``{"error": ...}``."""
    if not hasattr(os, "fork"):
        return {"error": "no fork on this platform"}
    command = [sys.executable, __file__, "--manager", str(work), "--tasks", str(args.tasks)]
    command += ["--rounds", str(args.rounds), "--clock", args.clock, "--kinds", *kinds]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:7.1f} /{min(samples) * 1000:6.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-kpo", action="store_true", help="skip KubernetesPodOperator")
    parser.add_argument("--goal", type=float, default=1.5, help="the largest parse ratio")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--manager", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--kinds", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    if args.manager is not None:
        manager(args.manager, args.tasks, args.rounds, args.kinds)
        return 0

    work = Path(tempfile.mkdtemp(prefix="bench-dag-parse-"))
    os.environ.setdefault("AIRFLOW_HOME", str(work / "airflow-home"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    # DagBag logs each fill at INFO; the processor logs it too, but a screenful of it hides
    # the report
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

    kinds = list(KINDS)
    if args.no_kpo:
        kinds.remove("KubernetesPodOperator")
    files: dict[str, Path] = {}
    for kind in list(kinds):
        try:
            importlib.import_module(KINDS[kind][2])
        except ImportError as e:
            print(f"{kind} skipped: {e}")
            kinds.remove(kind)
            continue
        files[kind] = work / f"sweep_{kind.lower()}.py"
        files[kind].write_text(dag_text(kind, args.tasks))
    import airflow.dag_processing.dagbag
    import airflow.serialization.serialized_objects  # noqa: F401

    cache_bytecode(work / "pycache")
    columns = ("parse", "serialize", "total", "compile", "processor", "processor_total")
    samples = {kind: {column: [] for column in columns} for kind in kinds}
    for kind in kinds:  # warm-up: bytecode written, caches filled
        parse_and_serialize(files[kind], args.tasks)
    for order in rotations(kinds, args.rounds):
        for kind in order:
            parse, ser = parse_and_serialize(files[kind], args.tasks)
            got = samples[kind]
            got["parse"].append(parse)
            got["serialize"].append(ser)
            got["total"].append(parse + ser)
            got["compile"].append(compile_time(files[kind]))
    forked = as_processor(work, args, kinds)
    if "error" in forked:
        print(f"as the dag-processor: skipped ({forked['error']})")
    else:
        for kind in kinds:
            samples[kind]["processor"] = [parse for parse, _ in forked[kind]]
            samples[kind]["processor_total"] = [parse + ser for parse, ser in forked[kind]]

    print(
        f"\n{args.tasks} tasks per DAG file, {args.rounds} rounds, {args.clock} time "
        f"(ms, median / min)"
    )
    print(
        f"  {'':26s} {'modules imported':-^59s}   {'as the dag-processor':-^31s}\n"
        f"  {'operator':26s} {'parse':>14s} {'serialize':>14s} {'parse+ser.':>14s}"
        f" {'compile':>14s}   {'parse':>14s} {'parse+ser.':>14s}"
    )
    for kind in kinds:
        got = samples[kind]
        row = " ".join(ms(got[c]) for c in ("parse", "serialize", "total", "compile"))
        forked_row = " ".join(ms(got[c]) for c in ("processor", "processor_total") if got[c])
        print(f"  {kind:26s} {row}   {forked_row}")
    ratios = {kind: {} for kind in kinds}
    print("ratios to EmptyOperator (medians)")
    for kind in kinds:
        for column in ("parse", "total", "processor", "processor_total"):
            if samples[kind][column]:
                ratios[kind][column] = statistics.median(samples[kind][column]) / (
                    statistics.median(samples["EmptyOperator"][column])
                )
        shown = {"parse": "parse", "total": "parse+ser.", "processor": "as processor: parse"}
        shown["processor_total"] = "parse+ser."
        text = "  ".join(f"{shown[c]} {r:5.2f}x" for c, r in ratios[kind].items())
        print(f"  {kind:26s} {text}")
    ours = ratios["TorchXKubernetesOperator"]
    ok = ours["parse"] <= args.goal
    print(f"goal (parse ratio, modules imported, <= {args.goal}): {'met' if ok else 'MISSED'}")
    kpo = ratios.get("KubernetesPodOperator", {}).get("parse")
    line = f"tasks={args.tasks} ratio_vs_empty={ours['parse']:.2f}"
    line += f" with_serialize={ours['total']:.2f}"
    line += (
        f" as_processor={ours['processor']:.2f}" if "processor" in ours else " as_processor=skipped"
    )
    line += f" kpo_ratio_vs_empty={kpo:.2f}" if kpo else " kpo_ratio_vs_empty=skipped"
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
