"""Property tests of the app model.

* Every valid AppDef survives ``to_dict``/``from_dict``, YAML and JSON unchanged.
* An AppDef with exactly one thing wrong fails with :class:`InvalidAppError` whose ``field``
  names that thing, whether it is validated as an object or loaded from its dict form.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchx_provider import specs
from torchx_provider.errors import InvalidAppError
from torchx_provider.specs import (
    MISSING,
    AppDef,
    BindMount,
    DeviceMount,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
    from_dict,
    normalize_rfc1123_name,
    to_dict,
    to_yaml,
)

# Whole apps are costly to generate; 100 examples of each keeps the unit suite fast.
PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies for valid apps -------------------------------------------------------------------

#: Characters a string that reaches a replica may hold: any but NUL (and lone surrogates).
_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
_text = lambda **kw: st.text(alphabet=_chars, **kw)  # noqa: E731
_no_dollar = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="$\x00"),
    max_size=12,
)
_macro = st.sampled_from(sorted(f"${{{n}}}" for n in specs.macros.NAMES))
#: Text whose every ``$`` is a known macro or an escaped ``$$``: what validation accepts.
macro_text = st.lists(st.one_of(_no_dollar, _macro, st.just("$$")), max_size=3).map("".join)
non_blank = _text(min_size=1, max_size=20).filter(lambda s: s.strip() != "")
#: Image references as the Docker engine and the kubelet parse them.
images = st.from_regex(
    r"([a-z0-9]+(\.[a-z0-9]+)*(:[0-9]{1,5})?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+)?"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,10})?",
    fullmatch=True,
)
env_name = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,15}", fullmatch=True)
abs_path = _text(max_size=15).map(lambda s: "/" + s)

json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    macro_text,
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)

resources = st.one_of(
    st.just(specs.NULL_RESOURCE).map(copy.deepcopy),
    st.sampled_from(sorted(specs.NAMED_RESOURCES)).map(specs.get_named_resource),
    st.builds(
        Resource,
        # -1 ("not set") only for the whole resource: NULL_RESOURCE above
        cpu=st.one_of(
            st.integers(0, 512), st.floats(0, 512, allow_nan=False, allow_infinity=False)
        ),
        gpu=st.integers(0, 16),
        memMB=st.integers(0, 2**30),
        capabilities=st.dictionaries(_text(max_size=10), json_value, max_size=2),
        devices=st.dictionaries(_text(min_size=1, max_size=10), st.integers(0, 64), max_size=2),
    ),
)
mounts = st.one_of(
    st.builds(BindMount, src_path=abs_path, dst_path=abs_path, read_only=st.booleans()),
    st.builds(
        VolumeMount,
        src=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True),
        dst_path=abs_path,
        read_only=st.booleans(),
    ),
    st.builds(
        DeviceMount,
        src_path=abs_path,
        dst_path=abs_path,
        permissions=st.text(alphabet="rwm", min_size=1, max_size=3),
    ),
)


@st.composite
def roles(draw: st.DrawFn, name: str) -> Role:
    num_replicas = draw(st.integers(1, 8))
    return Role(
        name=name,
        image=draw(images),
        # any text but TorchX's "not set" (MISSING), which validation refuses
        entrypoint=draw(_no_dollar.filter(lambda s: s.strip() != "" and s != MISSING)),
        args=draw(st.lists(macro_text, max_size=3)),
        env=draw(st.dictionaries(env_name, macro_text, max_size=2)),
        num_replicas=num_replicas,
        min_replicas=draw(st.one_of(st.none(), st.integers(1, num_replicas))),
        max_retries=draw(st.integers(0, 10)),
        retry_policy=draw(st.sampled_from(RetryPolicy)),
        resource=draw(resources),
        port_map=draw(st.dictionaries(non_blank, st.integers(1, 65535), max_size=2)),
        metadata=draw(st.dictionaries(_text(max_size=10), json_value, max_size=2)),
        # no two mounts at one place in the replica
        mounts=draw(st.lists(mounts, max_size=2, unique_by=lambda m: m.dst_path.rstrip("/"))),
        workspace=draw(st.one_of(st.none(), non_blank)),
    )


@st.composite
def apps(draw: st.DrawFn) -> AppDef:
    names = draw(st.lists(non_blank, min_size=1, max_size=3, unique_by=normalize_rfc1123_name))
    return AppDef(
        name=draw(non_blank),
        roles=[draw(roles(n)) for n in names],
        metadata=draw(st.dictionaries(_text(max_size=10), _text(max_size=10), max_size=3)),
    )


# -- round trips ---------------------------------------------------------------------------------


@PROPS
@given(apps())
def test_valid_apps_survive_dict_json_and_yaml_unchanged(app: AppDef) -> None:
    # One test for the three forms: generating apps costs more than checking them.
    original = copy.deepcopy(app)
    assert app.validate() is app
    data = to_dict(app)
    assert app == original  # to_dict does not change the app
    assert from_dict(data) == app
    assert to_dict(from_dict(data)) == data
    assert from_dict(json.loads(json.dumps(data))) == app
    assert from_dict(yaml.safe_load(to_yaml(app))) == app


# -- one thing wrong -----------------------------------------------------------------------------

#: Names that look like macros but are not ones.
unknown_macro_name = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True).filter(
    lambda n: n not in specs.macros.NAMES
)


@st.composite
def broken_apps(draw: st.DrawFn) -> tuple[AppDef, str]:
    """A valid app with one field broken, and the ``field`` the error must name."""
    app = draw(apps())
    i = draw(st.integers(0, len(app.roles) - 1))
    role = app.roles[i]
    at = f"roles[{i}]"
    kind = draw(
        st.sampled_from(
            [
                "app_name",
                "no_roles",
                "duplicate",
                "role_name",
                "image",
                "entrypoint",
                "num_replicas",
                "min_replicas",
                "resource",
                "macro_arg",
                "macro_env",
                "mount",
                "port",
                "env_name",
                "max_retries",
            ]
        )
    )
    if kind == "app_name":
        return replace(app, name=draw(st.sampled_from(["", " ", "\t\n"]))), "name"
    if kind == "no_roles":
        return replace(app, roles=[]), "roles"
    if kind == "duplicate":
        return replace(
            app, roles=[*app.roles, copy.deepcopy(role)]
        ), f"roles[{len(app.roles)}].name"
    if kind == "role_name":
        app.roles[i] = replace(role, name=draw(st.sampled_from(["", "  "])))
        return app, f"{at}.name"
    if kind == "image":
        app.roles[i] = replace(role, image="")
        return app, f"{at}.image"
    if kind == "entrypoint":
        bad = draw(st.sampled_from(["", "${app_id}", "run-${replica_id}"]))
        app.roles[i] = replace(role, entrypoint=bad)
        return app, f"{at}.entrypoint"
    if kind == "num_replicas":
        app.roles[i] = replace(role, num_replicas=draw(st.integers(max_value=0)))
        return app, f"{at}.num_replicas"
    if kind == "min_replicas":
        extra = draw(st.integers(1, 5))
        app.roles[i] = replace(role, min_replicas=role.num_replicas + extra)
        return app, f"{at}.min_replicas"
    if kind == "resource":
        which = draw(st.sampled_from(["cpu", "gpu", "memMB"]))
        value = draw(st.integers(max_value=-2))
        res = replace(copy.deepcopy(role.resource), **{which: value})
        app.roles[i] = replace(role, resource=res)
        return app, f"{at}.resource.{which}"
    if kind == "macro_arg":
        j = draw(st.integers(0, len(role.args)))
        args = list(role.args)
        args.insert(j, f"--x=${{{draw(unknown_macro_name)}}}")
        app.roles[i] = replace(role, args=args)
        return app, f"{at}.args[{j}]"
    if kind == "macro_env":
        env = dict(role.env)
        key = draw(env_name)
        env[key] = f"${{{draw(unknown_macro_name)}}}"
        app.roles[i] = replace(role, env=env)
        return app, f"{at}.env.{key}"
    if kind == "mount":
        bad = draw(
            st.sampled_from(
                [
                    BindMount("/a", "relative"),
                    VolumeMount("", "/v"),
                    DeviceMount("dev/fuse", "/dev/fuse"),
                    DeviceMount("/dev/fuse", "/dev/fuse", "rx"),
                ]
            )
        )
        app.roles[i] = replace(role, mounts=[*role.mounts, bad])
        return app, f"{at}.mounts[{len(role.mounts)}]"
    if kind == "port":
        port = draw(st.one_of(st.integers(max_value=0), st.integers(min_value=65536)))
        app.roles[i] = replace(role, port_map={**role.port_map, "bad": port})
        return app, f"{at}.port_map.bad"
    if kind == "env_name":
        app.roles[i] = replace(role, env={**role.env, "1BAD NAME": "x"})
        return app, f"{at}.env"
    app.roles[i] = replace(role, max_retries=draw(st.integers(max_value=-1)))
    return app, f"{at}.max_retries"


@PROPS
@given(broken_apps())
def test_broken_apps_name_the_broken_field(case: tuple[AppDef, str]) -> None:
    app, field = case
    data: Any = to_dict(app)  # the same app as a DAG author would write it
    for attempt in (app.validate, lambda: from_dict(data)):
        try:
            attempt()
        except InvalidAppError as e:
            assert e.field == field, str(e)
            assert str(e).startswith(f"{field}: ")
        else:
            raise AssertionError(f"no error for a broken {field}")


@st.composite
def broken_mount_strings(draw: st.DrawFn) -> str:
    good = draw(st.sampled_from(["type=bind,src=/a,dst=/b", "type=volume,src=v,dst=/v", ""]))
    bad = draw(
        st.sampled_from(
            [
                "src=/a,dst=/b",  # after a mount: src/dst twice; alone: no type first
                "type=bind,src=/a",
                "type=bind,dst=/b",
                "type=nfs,src=/a,dst=/b",
                "type=bind,src=/a,dst=/b,perm=r",
                "type=device,src=/dev/x,perm=z",
                "type=bind,src=/a,dst=/b,flavor=x",
                "type=bind,src=/a,dst=relative",
            ]
        )
    )
    return ",".join(p for p in (good, bad) if p)


@PROPS
@given(broken_mount_strings(), st.booleans())
def test_invalid_mount_strings_in_dicts_are_invalid_app_errors(mount: str, split: bool) -> None:
    role = {"name": "r", "image": "i", "entrypoint": "e"}
    data = {"name": "a", "roles": [{**role, "mounts": mount.split(",") if split else [mount]}]}
    try:
        from_dict(data)
    except InvalidAppError as e:
        assert e.field is not None and e.field.startswith("roles[0].mounts"), str(e)
    else:
        raise AssertionError(f"no error for mount {mount!r}")
