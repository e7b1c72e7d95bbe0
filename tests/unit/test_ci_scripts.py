"""The pieces of CI's own plumbing: the timings table and the test command's two lanes."""

from __future__ import annotations

import doctest
import importlib.util
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.checkout


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def test_the_timings_table_examples_run() -> None:
    result = doctest.testmod(_script("ci_timings"))
    assert result.attempted >= 3 and result.failed == 0


def test_the_timings_table_orders_by_start_and_says_a_failed_step(tmp_path: Path) -> None:
    m = _script("ci_timings")
    path = tmp_path / "timings.tsv"
    path.write_text("tests\t300\t1800\t1\t-\nsetup\t0\t60\t0\tcold\n")
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "ci_timings.py"), str(path), "1900"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| setup", "| tests", "| **whole run**"]
    assert "| 25:00 | - | exit 1 |" in rows[2]
    assert "31:40" in rows[3]
    assert m.parse("") == []


def test_the_timings_table_says_how_busy_the_machine_was_during_each_step(tmp_path: Path) -> None:
    timings = tmp_path / "timings.tsv"
    timings.write_text("setup\t0\t60\t0\tcold\ntests\t60\t120\t0\t-\n")
    cpu = tmp_path / "cpu.tsv"
    # two cores: 100 jiffies a second; the setup kept one busy, the tests both; a last line
    # cut short by the run's end
    cpu.write_text("0\t0\t0\n60\t3000\t6000\n120\t9000\t12000\n125\t90")
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "ci_timings.py"),
            str(timings),
            "120",
            "--cpu",
            str(cpu),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "| setup | 0:00 | 1:00 | cold | ok | 50% |" in out
    assert "| tests | 1:00 | 1:00 | - | ok | 100% |" in out
    assert "| **whole run** | 0:00 | **2:00** | | | 75% |" in out


def _lanes(tmp_path: Path, lane: str) -> set[str]:
    """The tests a session with ``--lane lane`` runs, of a small suite beside the real
    root conftest (its lane rule is the one under test)."""
    (tmp_path / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    kubernetes: uses the cluster\n")
    (tmp_path / "test_suite.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.fixture
            def kube_cluster():
                return "cluster"

            @pytest.fixture
            def deployment_cluster():
                return "cluster"

            @pytest.fixture
            def deployment(deployment_cluster):
                return deployment_cluster

            def test_plain():
                pass

            @pytest.mark.kubernetes
            def test_marked():
                pass

            def test_cluster_fixture(kube_cluster):
                pass

            def test_through_a_deployment(deployment):
                pass
            """
        )
    )
    return _collected(tmp_path, "--lane", lane, str(tmp_path))


def _collected(suite: Path, *args: str) -> set[str]:
    """The names of the tests a session of ``suite`` with ``args`` would run."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        cwd=suite,
        check=False,
    ).stdout
    return {line.split("::")[1] for line in out.splitlines() if "::" in line}


def _parts(tmp_path: Path, *args: str) -> dict[str, set[str]]:
    """The cluster tests each ``--cluster-part`` runs (with ``args``), of a small suite laid
    out like the real one beside the real root conftest."""
    (tmp_path / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    kubernetes: uses the cluster\n"
        "    cluster_alone: restarts the API server\n"
        "    training: real training\n"
    )
    files = {
        "tests/faults/test_rows.py": """
            import pytest

            @pytest.mark.kubernetes
            def test_a_row():
                pass

            @pytest.mark.kubernetes
            @pytest.mark.cluster_alone
            def test_an_api_server_restart():
                pass

            def test_local_in_faults():
                pass
            """,
        "tests/airflow/test_torchx_deployment.py": """
            import pytest

            @pytest.fixture
            def deployment_cluster():
                return "cluster"

            def test_deployed(deployment_cluster):
                pass
            """,
        "tests/integration/kubernetes/test_kueue_holds.py": """
            import pytest

            @pytest.fixture
            def kube_cluster():
                return "cluster"

            def test_held(kube_cluster):
                pass

            @pytest.mark.training
            def test_trained(kube_cluster):
                pass
            """,
        "tests/integration/kubernetes/test_kueue.py": """
            import pytest

            @pytest.fixture
            def kube_cluster():
                return "cluster"

            def test_quota(kube_cluster):
                pass
            """,
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    return {
        part: _collected(tmp_path, "--lane", "cluster", "--cluster-part", part, *args)
        for part in ("kube", "kube2", "rows", "alone")
    }


def test_each_cluster_test_is_in_exactly_one_part(tmp_path: Path) -> None:
    """The API server restarts alone; the fault rows and the deployment beside the rest,
    which keeps Kueue's quota to itself."""
    assert _parts(tmp_path) == {
        "kube": {"test_quota"},
        "kube2": {"test_held", "test_trained"},
        "rows": {"test_a_row", "test_deployed"},
        "alone": {"test_an_api_server_restart"},
    }


def test_kube_takes_the_files_of_kube2_it_is_given_and_nothing_else(tmp_path: Path) -> None:
    """Where both sessions have Kueue queues of their own (the lowest clients' tier), a file of
    ``kube2`` can run in ``kube`` instead: each test is still in exactly one part."""
    taken = "tests/integration/kubernetes/test_kueue_holds.py"
    assert _parts(tmp_path, "--kube-takes", taken) == {
        "kube": {"test_quota", "test_held", "test_trained"},
        "kube2": set(),
        "rows": {"test_a_row", "test_deployed"},
        "alone": {"test_an_api_server_restart"},
    }
    # a file that is not kube2's moves nothing
    faults = "tests/faults/test_rows.py"
    assert _parts(tmp_path, "--kube-takes", faults)["rows"] == {"test_a_row", "test_deployed"}


def test_each_test_is_in_exactly_one_lane(tmp_path: Path) -> None:
    cluster = _lanes(tmp_path, "cluster")
    local = _lanes(tmp_path, "local")
    assert cluster == {"test_marked", "test_cluster_fixture", "test_through_a_deployment"}
    assert local == {"test_plain"}


def test_only_the_lowest_clients_entry_has_lanes() -> None:
    """``VERSION+lowest@cluster`` / ``@local`` run one lane of the lowest clients' tiers (CI
    runs them at different times); any other lane or entry is refused before anything runs."""
    for entry in ("3.1.8@local", "3.3.2+lowest@rows", "3.3.2+lowest@"):
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "other_versions.sh"), entry],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, (entry, done.stdout, done.stderr)
        assert "VERSION+lowest@cluster or @local" in done.stderr, done.stderr


def _tiers(entry: str) -> set[str]:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "other_versions.sh"), "--tiers", entry],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    name, _, paths = done.stdout.strip().partition(": ")
    assert name == entry, done.stdout
    return set(paths.split())


def test_an_entrys_unit_and_docker_parts_run_its_whole_tiers_between_them() -> None:
    """CI runs an entry as ``@unit`` (no container: beside the test command) and ``@docker``
    (later): between them, every tier of the whole entry, the unit tier only in ``@unit``."""
    for whole, version in (("3.1.8", "3.1.8"), ("3.3.2+lowest@local", "3.3.2+lowest")):
        unit, docker = _tiers(f"{version}@unit"), _tiers(f"{version}@docker")
        assert unit == {"tests/unit"}
        assert "tests/unit" not in docker
        assert unit | docker == _tiers(whole), whole
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "other_versions.sh"), "3.1.8@unit@docker"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "VERSION@unit or VERSION@docker" in done.stderr, done.stderr


def test_each_entry_waits_for_its_own_environment(tmp_path: Path) -> None:
    """With ``TORCHX_ENVS_READY``, an entry starts once its environment's file is there (the
    first ready first, whatever the order given), and one whose environment was not made fails
    saying so, without making it."""
    ready = tmp_path / "ready"
    ready.mkdir()
    logs = tmp_path / "logs"
    (ready / "3.1.8.rc").write_text("1\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "TORCHX_ENVS_READY": str(ready),
        "TORCHX_OTHER_VERSIONS_LOGS": str(logs),
    }
    run = subprocess.Popen(
        ["bash", str(REPO / "scripts" / "other_versions.sh"), "3.2.2", "3.1.8"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not (logs / "3.1.8.log").exists():
            assert time.monotonic() < deadline, "3.1.8, whose environment's file is there, waited"
            assert run.poll() is None, run.communicate()[0]
            time.sleep(0.2)
        time.sleep(3)  # the loop looks for ready environments every 2 s
        assert run.poll() is None, run.communicate()[0]
        assert not (logs / "3.2.2.log").exists(), "3.2.2 started before its environment was made"
        (ready / "3.2.2.rc").write_text("1\n")
        out, _ = run.communicate(timeout=30)
    finally:
        run.kill()
    assert run.returncode == 1, out
    for version in ("3.1.8", "3.2.2"):
        assert f"==> Airflow {version}: its environment was not made" in out, out
        assert f"Airflow {version}: FAILED in 0 s" in out, out


def test_an_install_of_a_removed_checkout_is_found_in_an_environment(tmp_path: Path) -> None:
    """The other versions' environments are kept across runs, but an editable install of a
    clone removed since breaks ``import airflow`` there: where it points is read (and
    scripts/airflow_venv.py uninstalls it) instead of the whole environment being made again;
    an install of this very checkout is not made twice."""
    m = _script("airflow_venv")
    dist = tmp_path / "site" / "airflow_provider_torchx-0.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: airflow-provider-torchx\n")
    env = {"PYTHONPATH": str(tmp_path / "site")}

    def pointing_at(checkout: Path) -> Path | None:
        (dist / "direct_url.json").write_text(
            f'{{"dir_info": {{"editable": true}}, "url": "{checkout.as_uri()}"}}'
        )
        return m.installed_from(Path(sys.executable), env=env)

    assert pointing_at(REPO) == REPO
    assert pointing_at(tmp_path / "a removed clone") == tmp_path / "a removed clone"
    (dist / "direct_url.json").unlink()
    assert m.installed_from(Path(sys.executable), env=env) is None


def test_the_api_server_restarts_and_another_session_exclude_each_other(tmp_path: Path) -> None:
    """With ``TORCHX_TEST_CLUSTER_LOCK`` set, the test command's ``alone`` part (the API
    server restarts) waits for a session holding the sessions' lock (shared) to end, and
    holds it exclusively while it runs: a session starting then waits for it in turn."""
    sessions = tmp_path / "cluster.lock.sessions"
    record = tmp_path / "record"
    # a stand-in for pytest: each part says when it ran; 'alone' also tries the lock as a
    # session starting meanwhile would
    fake = tmp_path / "python"
    fake.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/bash
            [ "$1" = -m ] || exec {sys.executable} "$@"
            all="$*"; part="${{all##*--cluster-part }}"; part="${{part%% *}}"
            case "$all" in *"--lane local"*) part=local ;; esac
            if [ "$part" = alone ]; then
              flock -s -n {sessions} true && echo "alone: a session got in" >>{record}
            fi
            echo "$part $(date +%s.%N)" >>{record}
            echo "1 passed in 0.01s"
            """
        )
    )
    fake.chmod(0o755)
    holder = subprocess.Popen(["flock", "-s", str(sessions), "sleep", "3"])
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "test.sh")],
            env={
                "PATH": "/usr/bin:/bin",
                "PYTHON": str(fake),
                "TORCHX_TEST_LOGS": str(tmp_path / "logs"),
                "TORCHX_TEST_CLUSTER_LOCK": str(tmp_path / "cluster.lock"),
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        holder.wait(timeout=10)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = record.read_text().splitlines()
    ran = {line.split()[0]: float(line.split()[1]) for line in lines if " " in line}
    assert "alone: a session got in" not in lines
    assert set(ran) == {"kube", "kube2", "rows", "alone", "local"}, lines
    # the parts beside the session did not wait for it; 'alone' did
    assert ran["kube"] - ran["local"] < 2.5 and ran["alone"] - ran["kube"] >= 2.0, lines
    assert time.monotonic() - started >= 3


def test_what_failed_shows_each_failed_tests_message_beyond_its_first_line(tmp_path: Path) -> None:
    """The end of a failed run shows the first failed tests' whole messages (a timed-out
    wait's second line on is the story of the task it waited on), not pytest's first line."""
    story = "\n".join(
        ["timed out after 300s", "task instance: state running, try 1"]
        + [f"record {i}" for i in range(50)]
    )
    suite = ET.Element("testsuite")
    for classname, name, outcome, message in (
        ("tests.a", "test_ok", None, None),
        ("tests.a", "test_waits", "failure", story),
        ("tests.b", "test_setup", "error", "fixture broke"),
        ("tests.b", "test_more", "failure", "x"),
    ):
        case = ET.SubElement(suite, "testcase", classname=classname, name=name)
        if outcome:
            ET.SubElement(case, outcome, message=message or "").text = "traceback"
    junit = tmp_path / "cluster-rows.xml"
    ET.ElementTree(suite).write(junit)
    lines = _script("ci_failures").report([junit], lines=40, tests=2)
    log = tmp_path / "cluster-rows.log"
    assert lines[0] == f"--- {log}: tests.a::test_waits"
    assert lines[2] == "  task instance: state running, try 1"
    assert lines[40] == "  record 37"
    assert lines[41] == "  (12 more lines in that log)"
    assert lines[42:] == [
        f"--- {log}: tests.b::test_setup",
        "  fixture broke",
        "--- and 1 more failed (listed above)",
    ]
