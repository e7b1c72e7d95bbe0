"""Property tests of the whole dry run, on every backend, with input that may be wrong.

Generated apps and run options -- valid ones and ones with a wrong value anywhere a user can
put one (empty or null names, replica counts and bounds out of range, negative resources,
overlays of the wrong kind, ports out of range, run options that are unknown, ill-typed or
not valid Kubernetes names) -- go through ``create_scheduler(...).submit_dryrun``. Each must
give either a request valid against the upstream CRD schema (a Docker container spec for
``local_docker``) or one clear error: an :class:`InvalidAppError` naming the field or an
:class:`InvalidOptionError` naming the option, with a message -- never another exception,
and never a call to a cluster (the clients point at a port where nothing listens, so a call
would surface as a different error).

``TORCHX_PROPERTY_EXAMPLES`` sets the number of examples per backend: 10,000 in CI (about a
minute per backend on a quiet machine), 300 by default. What that buys, measured by the kinds
of wrong value (the places of :class:`Gen`'s faults: ``cfg.queue``, ``bind.src_path``, ...)
an example run reaches: on ``kubernetes``, 25 kinds in 3,000 examples, the last one first
met at example 2,578 (27 in 4,000, the last at 3,967); ``local_docker`` alike. Kinds behind
optional values (a run option drawn in a quarter of the examples) are still being met for the
first time after 2,500 examples, so the count is not cut below 10,000.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import string
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crd_schemas import (
    validate_appwrapper,
    validate_appwrapper_v1beta2,
    validate_jobset,
    validate_volcano_job,
)
from dead_backends import Schedulers, unreachable_backends
from torchx_provider import specs
from torchx_provider.errors import InvalidAppError, InvalidOptionError

EXAMPLES = int(
    os.environ.get("TORCHX_PROPERTY_EXAMPLES") or (10_000 if os.environ.get("CI") else 300)
)
PROPS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NAME_CHARS = string.ascii_letters + string.digits + "-_. /:" + "é"
good_names = st.text(NAME_CHARS, min_size=1, max_size=70).filter(lambda s: s.strip() != "")


#: places for a wrong value an example may have: every value a user sets goes through one
#: (measured: 3 to 55 an example, about 32 in the middle, by the number of roles, mounts and
#: options drawn)
PLACES = 64


class Gen:
    """Draws from the good values; a third of the examples are drawn to get exactly one wrong
    value, at a place drawn uniformly among :data:`PLACES` (where the example has fewer, it
    stays valid), so that each wrong value must be refused on its own (with several, one
    refusal would hide that another was let through) and a place late in the example (a run
    option) is as likely to get it as the first one."""

    def __init__(self, draw: Any, backend: str) -> None:
        self.draw, self.backend = draw, backend
        self.fault_at = draw(st.integers(0, PLACES - 1)) if draw(st.integers(0, 2)) == 0 else -1
        self.places = 0
        self.faults: list[str] = []  # the wrong value this example got (at most one)

    def _wants_fault(self) -> bool:
        place, self.places = self.places, self.places + 1
        return place == self.fault_at

    def _wrong(self, what: str, value: Any) -> Any:
        self.faults.append(f"{what}={value!r}")
        return value

    def pick(self, good: list[Any], bad: list[Any], what: str) -> Any:
        if self._wants_fault():
            return self._wrong(what, self.draw(st.sampled_from(bad)))
        return self.draw(st.sampled_from(good))

    def name(self, what: str) -> Any:
        if self._wants_fault():
            return self._wrong(what, self.draw(st.sampled_from(["", None, "  "])))
        return self.draw(good_names)

    def number(self, low: int, high: int, bad: list[Any], what: str) -> Any:
        if self._wants_fault():
            return self._wrong(what, self.draw(st.sampled_from(bad)))
        return self.draw(st.integers(low, high))


#: (good, bad) names of Kubernetes objects, by the rule the API server applies to them: a
#: DNS label (namespaces), a DNS subdomain (most objects), or a subdomain that is also a
#: label value (Kueue's queue and priority class)
K8S_LABEL = (["default", "team-a", "a" * 63], ["Bad Name!", "UPPER", "a" * 64, "-x", "a.b", 5])
K8S_SUBDOMAIN = (
    ["default", "team-a", "a" * 63, "team.a", ".".join(["a" * 63] * 3 + ["a" * 61])],
    ["Bad Name!", "UPPER", "a" * 254, "-x", "a..b", 5],
)
K8S_LABELLED = (
    ["default", "team-a", "a" * 63, "team.a"],
    ["Bad Name!", "UPPER", "a" * 64, "-x", "a..b", 5],
)
OVERLAYS_GOOD = [{}, {"kubernetes": {"metadata": {"labels": {"team": "ml"}}}}]
OVERLAYS_BAD = [
    {"kubernetes": ["not", "a", "mapping"]},
    {"kubernetes": "spec: {}"},
    {"kubernetes": {"spec": ["x"]}},
    {"kubernetes": {"metadata": "x"}},
]


def role(g: Gen) -> Any:
    draw = g.draw
    replicas = g.number(1, 6, [0, -1], "num_replicas")
    mounts = []
    if draw(st.booleans()):
        mounts.append(
            specs.BindMount(
                src_path=g.pick(["/data"], ["", "relative"], "bind.src_path"),
                dst_path=g.pick(["/data"], ["", "rel"], "bind.dst_path"),
            )
        )
    if draw(st.booleans()):
        src = g.pick(["claim-a"], ["Bad Claim", ""], "volume.src")
        mounts.append(specs.VolumeMount(src=src, dst_path="/ckpt"))
    ports = {}
    if draw(st.booleans()):
        port = g.number(1, 65535, [0, 70000], "port")
        ports[g.pick(["c10d", "tb", "Tensor Board"], [""], "port name")] = port
    return specs.Role(
        g.name("role.name"),
        image=g.pick(
            ["registry.example.com/app:1", "busybox"], ["", "busy\x00box", "Big Box"], "image"
        ),
        entrypoint=g.pick(["python", "sh"], ["", "py\x00"], "entrypoint"),
        args=[
            *draw(
                st.lists(st.sampled_from(["-m", "train", "${replica_id}", "${app_id}"]), max_size=3)
            ),
            g.pick(["--lr=0.1"], ["--lr=\x00"], "args"),
        ],
        env={
            g.pick(["LR", "_X"], ["bad name", "", "A=B"], "env"): g.pick(
                ["1", "$${HOME}"], ["secret\x00"], "env value"
            )
        }
        if draw(st.booleans())
        else {},
        num_replicas=replicas,
        min_replicas=g.pick([None, 1], [0, -1, 99], "min_replicas"),
        max_retries=g.number(0, 3, [-1], "max_retries"),
        # -1 is TorchX's "not set" only for the whole resource (NULL_RESOURCE)
        resource=copy.deepcopy(specs.NULL_RESOURCE)
        if draw(st.integers(0, 4)) == 0
        else specs.Resource(
            cpu=g.number(1, 16, [-1, -2, float("nan")], "cpu"),
            gpu=g.number(0, 4, [-1, -2, 10**9], "gpu"),
            memMB=g.number(128, 65536, [-5, -1, 2**40], "memMB"),
        ),
        port_map=ports,
        # another backend's overlay is ignored, whatever its shape
        metadata=g.draw(st.sampled_from(OVERLAYS_GOOD + OVERLAYS_BAD))
        if g.backend == "local_docker"
        else g.pick(OVERLAYS_GOOD, OVERLAYS_BAD, "metadata"),
        mounts=mounts,
    )


def build_app(g: Gen) -> specs.AppDef:
    role_list = [role(g) for _ in range(g.number(1, 3, [0], "roles"))]
    for i, r in enumerate(role_list):
        # two roles whose names give one object name are refused: another test's matter
        if isinstance(r.name, str) and r.name.strip():
            role_list[i] = dataclasses.replace(r, name=f"r{i}-{r.name}")
    return specs.AppDef(g.name("app.name"), role_list)


SHARED = {
    "service_account": K8S_SUBDOMAIN,
    "image_secret": K8S_SUBDOMAIN,
    "reserved_millicpu": ([0, 100], [-1, "lots"]),
    "labels": ([{"team": "ml"}], [{"team": "Bad Value!"}, {"": "x"}, "team=ml"]),
}
OPTIONS: dict[str, dict[str, tuple[list[Any], list[Any]]]] = {
    "kubernetes": {
        **SHARED,
        "namespace": K8S_LABEL,
        "priority_class": K8S_SUBDOMAIN,
        "ttl_seconds_after_finished": ([0, 60], [-1, "soon"]),
    },
    "kubernetes_mcad": {
        **SHARED,
        "namespace": K8S_LABEL,
        "priority": ([0, 5], ["high"]),
        "priority_class_name": K8S_SUBDOMAIN,
        "coscheduler_name": (["scheduler-plugins-scheduler"], ["Bad!", 1]),
        "api_group": (["workload.codeflare.dev", "mcad.ibm.com"], ["example.com"]),
    },
    "kubernetes_appwrapper": {
        **SHARED,
        "namespace": K8S_LABEL,
        "local_queue": K8S_LABELLED,
        "priority_class": K8S_LABELLED,
        "cancel_by": (["suspend", "delete"], ["drop"]),
        "warmup_grace_period": (["5m", "30s"], ["five minutes", "-1s"]),
    },
    "kubernetes_jobset": {
        **SHARED,
        "namespace": K8S_LABEL,
        "local_queue": K8S_LABELLED,
        "priority_class": K8S_LABELLED,
        "success_policy": (["all", "first_role"], ["any", 1]),
        "start_order": (["any", "in_order"], ["sequential"]),
        "fail_on_exit_codes": (["2", "1,3"], ["0", "a", "300"]),
        "ttl_seconds_after_finished": ([0, 60], [-1, "soon"]),
        "cancel_by": (["suspend", "delete"], ["drop"]),
    },
    "local_docker": {
        "copy_env": ([["A*"], "A*"], [5]),
        "env": ([{"A": "1"}], [{"bad name": "1"}, 3]),
        "privileged": ([True, False], ["maybe"]),
        "network": (["torchx", "team-net"], ["", "  "]),
    },
}
#: options without which a backend refuses any app (always set, to a good or a bad value)
REQUIRED: dict[str, dict[str, tuple[list[Any], list[Any]]]] = {
    "kubernetes": {"queue": K8S_SUBDOMAIN},
}


def options(g: Gen, backend: str) -> dict[str, Any]:
    table = OPTIONS[backend]
    chosen = g.draw(st.lists(st.sampled_from(sorted(table)), unique=True, max_size=3))
    cfg = {name: g.pick(*table[name], f"cfg.{name}") for name in chosen}
    if "priority_class" in cfg and "local_queue" in table:
        cfg.setdefault("local_queue", "team-a")  # a Kueue priority needs its LocalQueue
    cfg.update({n: g.pick(*spec, f"cfg.{n}") for n, spec in REQUIRED.get(backend, {}).items()})
    if g._wants_fault():
        cfg["no_such_option"] = g._wrong("cfg.no_such_option", "x")
    return cfg


@pytest.fixture(scope="module", autouse=True)
def dead_backends() -> Iterator[None]:
    with unreachable_backends():
        yield


scheduler = Schedulers("props")


VALIDATE = {
    "kubernetes": validate_volcano_job,
    "kubernetes_mcad": validate_appwrapper,
    "kubernetes_appwrapper": validate_appwrapper_v1beta2,
    "kubernetes_jobset": validate_jobset,
}


def check_docker(request: Any) -> None:
    for spec in request.containers:
        assert spec["image"] and spec["name"], spec
        assert isinstance(spec.get("command") or [], list)
        assert all(isinstance(k, str) and "=" not in k for k in (spec.get("environment") or {}))


def dry_run_or_clear_error(backend: str, draw: Any) -> tuple[str, str | None]:
    """``"ok"`` for a valid request, ``"refused"`` for a clear error (anything else fails);
    and the place of the example's wrong value, if it has one."""
    g = Gen(draw, backend)
    try:
        app = build_app(g)
        cfg = options(g, backend)
        info = scheduler(backend).submit_dryrun(app, cfg)
    except InvalidAppError as e:
        assert e.message and str(e), e
        assert g.faults, f"a valid example was refused: {e}"
        return "refused", g.faults[0].split("=", 1)[0]
    except InvalidOptionError as e:
        assert str(e), e
        assert g.faults, f"a valid example was refused: {e}"
        return "refused", g.faults[0].split("=", 1)[0]
    assert not g.faults, f"accepted although wrong: {g.faults}"
    if backend == "local_docker":
        check_docker(info.request)
    else:
        VALIDATE[backend](info.request.body)
    return "ok", None


SEEN: dict[str, dict[str, int]] = {}


@pytest.mark.parametrize("backend", sorted(OPTIONS))
def test_any_input_gives_a_valid_request_or_one_clear_error(backend: str) -> None:
    counts = SEEN.setdefault(backend, {"ok": 0, "refused": 0})
    #: each place a wrong value was put (indexes folded) -> the example that first did
    first: dict[str, int] = {}

    @PROPS
    @given(data=st.data())
    def check(data: Any) -> None:
        outcome, place = dry_run_or_clear_error(backend, data.draw)
        counts[outcome] += 1
        if place is not None:
            first.setdefault(re.sub(r"\d+", "N", place), sum(counts.values()))

    check()
    last = max(first.values(), default=0)
    print(
        f"{backend}: wrong values put in {len(first)} places, the last of them first at "
        f"example {last} of {sum(counts.values())}"
    )
    # both outcomes must really be exercised, or the property says little
    assert counts["ok"] >= EXAMPLES // 20 and counts["refused"] >= EXAMPLES // 20, counts
    print(f"{backend}: {counts['ok']} valid requests, {counts['refused']} refused")
