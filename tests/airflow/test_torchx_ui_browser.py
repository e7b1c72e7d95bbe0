"""The browser tier: what a user sees in Airflow's UI, in a real browser (Debian's
chromium driven by Playwright: ``/usr/bin/chromium`` or ``TORCHX_CHROMIUM``, never a
downloaded one), on a real deployment (api-server, scheduler, dag-processor, triggerer)
running TorchX tasks on the local Docker engine:

* a deferred task's Logs tab shows its replicas' lines while the job runs;
* the task's "TorchX job" button is there and points at the job;
* a failed task's log ends with the failure summary (one folded group per failed replica);
* the forms of both connection types show labelled fields, secrets as password fields,
  and what is typed into them reaches the connection intact (TLS verification left on).

Each test saves screenshots under ``.ci-logs/browser/``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from torchx_airflow_helpers import DEPLOYMENT_DAG_HEAD, airflow_bin, remove_dags_containers
from torchx_deployment import Deployment, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.docker, pytest.mark.slow, pytest.mark.browser]

SHOTS = Path(__file__).resolve().parents[2] / ".ci-logs" / "browser"


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture
def screenshot(page: Any, request: Any) -> Any:
    """``screenshot(name)`` saves the page as ``.ci-logs/browser/<test>-<name>.png``."""
    SHOTS.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = SHOTS / f"{request.node.name}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


JOB_URL = "https://jobs.example/torchx/{app_id}"
DAGS = (
    DEPLOYMENT_DAG_HEAD
    + """

TICKS = (
    "trap 'exit 143' TERM; i=0; while [ $i -lt 240 ]; do "
    "echo replica $TORCHX_REPLICA_IDX tick $i; i=$((i+1)); sleep 0.5 & wait $!; done"
)
CRASH = (
    "echo loading data; echo epoch 1 loss 0.9; echo 'Traceback (most recent call last):'; "
    "echo '  File train.py, line 7, in <module>'; echo 'RuntimeError: CUDA out of memory'; exit 3"
)

with DAG("torchx_ui_running", **ARGS):
    TorchXDockerOperator(
        task_id="train", app=app("uirun", TICKS), conn_id="docker_with_link", deferrable=True
    )

with DAG("torchx_ui_failing", **ARGS):
    TorchXDockerOperator(
        task_id="train", app=app("uifail", CRASH, replicas=1), deferrable=True, retries=0
    )
"""
)


@pytest.fixture(scope="module")
def deployment(docker_engine: Any) -> Iterator[Deployment]:
    home = Path(tempfile.mkdtemp(prefix="torchx-ui-"))
    dep = Deployment(home, airflow_bin())
    dep.env["AIRFLOW_CONN_DOCKER_WITH_LINK"] = json.dumps(
        {"conn_type": "torchx_docker", "extra": {"job_url_template": JOB_URL}}
    )
    (home / "dags" / "torchx_ui.py").write_text(DAGS)
    try:
        dep.start_all()
        yield dep
    finally:
        dep.stop_all()
        remove_dags_containers(docker_engine, ("torchx_ui_running", "torchx_ui_failing"))
        if not os.environ.get("TORCHX_KEEP_DEPLOYMENT"):
            shutil.rmtree(home, ignore_errors=True)


def task_page(dep: Deployment, dag_id: str, run_id: str) -> str:
    return f"{dep.base}/dags/{dag_id}/runs/{run_id}/tasks/train"


def test_a_deferred_tasks_logs_and_job_link(
    deployment: Deployment, page: Any, screenshot: Any, docker_engine: Any
) -> None:
    dag_id = "torchx_ui_running"
    run_id = deployment.run_until(dag_id, "deferred", 180)
    app_id = str(
        wait_for("the app id", lambda: deployment.xcom(dag_id, run_id, "train", "app_id"), 60)
    )
    page.goto(task_page(deployment, dag_id, run_id))
    # the Logs tab, while the job runs: replica lines appear (the view refreshes itself)
    page.get_by_text(re.compile(r"\[worker/0\] replica 0 tick \d+")).first.wait_for(timeout=90_000)
    page.get_by_text(re.compile(r"\[worker/1\] replica 1 tick \d+")).first.wait_for()
    assert deployment.ti(dag_id, run_id, "train")["state"] == "deferred"
    screenshot("logs-while-running")
    # the extra link, on the Details tab
    page.goto(task_page(deployment, dag_id, run_id) + "/details")
    link = page.get_by_role("link", name=re.compile("TorchX job", re.I))
    link.first.wait_for()
    assert link.first.get_attribute("href") == JOB_URL.format(app_id=app_id)
    screenshot("job-link")
    deployment.set_state(dag_id, run_id, "train", "failed")  # cancels the job


def test_a_failed_tasks_log_ends_with_the_failure_summary(
    deployment: Deployment, page: Any, screenshot: Any
) -> None:
    dag_id = "torchx_ui_failing"
    run_id = deployment.run_until(dag_id, "failed", 240)
    page.goto(task_page(deployment, dag_id, run_id))
    group = page.get_by_text(re.compile(r"worker/0 failed: exit code 3 .*last \d+ lines"))
    group.first.wait_for(timeout=60_000)
    screenshot("failure-summary-folded")
    # folded: the traceback shows once (as the replica wrote it); unfolded, once more
    traceback = page.get_by_text("[worker/0] RuntimeError: CUDA out of memory").filter(visible=True)
    folded = traceback.count()
    assert folded == 1
    group.first.click()
    wait_for("the group to unfold", lambda: traceback.count() == folded + 1, 10)
    screenshot("failure-summary-open")


def open_connection_form(page: Any, base: str, conn_id: str, type_name: str) -> Any:
    """The "Add Connection" dialog with ``type_name`` chosen (standard fields unfolded)."""
    page.goto(f"{base}/connections")
    page.get_by_role("button", name=re.compile("Add Connection", re.I)).click()
    dialog = page.get_by_role("dialog")
    dialog.locator("input[name=connection_id]").fill(conn_id)
    page.get_by_role("combobox", name="Connection Type").fill(type_name)
    page.keyboard.press("Enter")
    return dialog


def unfold(dialog: Any, section: str) -> None:
    """Open one of the form's sections ("Standard Fields", "Extra Fields"): one at a time."""
    dialog.get_by_role("button", name=section, exact=True).click()


def field(dialog: Any, name: str) -> tuple[str, Any]:
    """(label, input element) of the form's field ``name`` (an extra or a standard field)."""
    selector = f"#element_{name}, [name=element_{name}], [name={name}]"
    element = dialog.locator(selector).first
    group = dialog.locator("[role=group]", has=dialog.page.locator(selector)).last
    return group.locator("label").first.inner_text().strip(), element


def check_fields(dialog: Any, expected: dict[str, tuple[str, str]]) -> None:
    """Each field has its label and its kind of input (password ones hide what is typed)."""
    for name, (label, kind) in expected.items():
        shown, element = field(dialog, name)
        assert shown.rstrip("* \n") == label, (name, shown)
        tag = element.evaluate("e => e.tagName.toLowerCase()")
        typ = element.get_attribute("type") or ""
        assert {
            "password": typ == "password",
            "text": tag == "input" and typ in ("", "text"),
            "lines": tag == "textarea",
            "switch": typ == "checkbox",
        }[kind], (name, tag, typ)


def save(dialog: Any, dep: Deployment, conn_id: str, secrets: set[str]) -> dict[str, Any]:
    """Save the form; the connection as stored (read with the CLI, which shows secrets), after
    checking that Airflow's connections API (what the UI reads back) hides ``secrets``."""
    dialog.get_by_role("button", name="Save").click()
    dialog.wait_for(state="hidden")
    shown = json.loads(dep.request("GET", f"/api/v2/connections/{conn_id}")["extra"])
    assert {k for k in secrets if shown.get(k) != "***"} == set(), shown
    [stored] = json.loads(dep.cli("connections", "get", conn_id, "-o", "json"))
    assert isinstance(stored, dict)
    return stored


def pem(label: str, body: str) -> str:
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"]) + "\n"


CA = pem("CERTIFICATE", "MIIDBTCCAe2gAwIBAgIUJ" * 9)
KEY = pem("PRIVATE KEY", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" * 7)


def test_the_docker_form_keeps_tls_verification_on_and_pem_intact(
    deployment: Deployment, page: Any, screenshot: Any
) -> None:
    """Untouched, the TLS switch leaves verification on; PEM content survives the form: the
    certificates in multi-line fields, the key (hidden, one line) rewrapped when read."""
    from torchx_provider.hooks.docker import resolve_docker_client

    dialog = open_connection_form(page, deployment.base, "ui_docker", "TorchX Docker")
    check_fields(
        dialog,
        {
            "host": ("Engine URL", "text"),
            "login": ("Registry user", "text"),
            "password": ("Registry password", "password"),
        },
    )
    field(dialog, "host")[1].fill("tcp://engine.example:2376")
    unfold(dialog, "Extra Fields")
    check_fields(
        dialog,
        {
            "tls_ca_cert": ("TLS CA certificate", "lines"),
            "tls_client_cert": ("TLS client certificate", "lines"),
            "tls_client_private_key": ("TLS client key", "password"),
            "tls_skip_verify": ("Skip TLS verification", "switch"),
            "job_url_template": ("Job URL template", "text"),
        },
    )
    field(dialog, "tls_ca_cert")[1].fill(CA)
    field(dialog, "tls_client_cert")[1].fill(CA)
    # as a paste: the hidden one-line field drops the key's line breaks
    field(dialog, "tls_client_private_key")[1].fill(KEY)
    screenshot("filled")
    conn = save(dialog, deployment, "ui_docker", {"tls_client_private_key"})
    extra = conn["extra_dejson"]
    assert "\n" not in extra["tls_client_private_key"] and "\n" in extra["tls_ca_cert"]
    kwargs, _ = resolve_docker_client(extra, conn["host"], conn["port"], None, None, env={})
    assert kwargs["tls_verify"] is True, extra
    assert kwargs["tls_ca_cert"] == CA and kwargs["tls_client_cert"] == CA
    assert kwargs["tls_client_key"] == KEY


def test_the_kubernetes_form_hides_the_kubeconfig_and_takes_it_on_one_line(
    deployment: Deployment, page: Any, screenshot: Any
) -> None:
    from torchx_provider.hooks.kubernetes import resolve_kube_client

    dialog = open_connection_form(page, deployment.base, "ui_kube", "TorchX Kubernetes")
    unfold(dialog, "Extra Fields")
    check_fields(
        dialog,
        {
            "in_cluster": ("In cluster", "switch"),
            "kube_config_path": ("Kube config path", "text"),
            "kube_config_secret": ("Kube config (JSON or base64)", "password"),
            "cluster_context": ("Cluster context", "text"),
            "namespace": ("Namespace", "text"),
            "disable_verify_ssl": ("Disable SSL verification", "switch"),
            "job_url_template": ("Job URL template", "text"),
        },
    )
    kubeconfig = (
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
        "    server: https://10.1.2.3:6443\nusers:\n- name: u\n  user:\n"
        "    token: ui-form-token-0123456789\ncontexts:\n- name: ml\n  context:\n"
        "    cluster: c\n    user: u\ncurrent-context: ml\n"
    )
    field(dialog, "kube_config_secret")[1].fill(base64.b64encode(kubeconfig.encode()).decode())
    field(dialog, "namespace")[1].fill("training")
    screenshot("filled")
    conn = save(dialog, deployment, "ui_kube", {"kube_config_secret"})
    kwargs, secrets = resolve_kube_client(conn["extra_dejson"], "ui_kube", env={})
    assert "server: https://10.1.2.3:6443" in kwargs["kubeconfig"]
    assert kwargs["namespace"] == "training" and "ui-form-token-0123456789" in secrets
    assert "disable_verify_ssl" not in kwargs and "in_cluster" not in kwargs
