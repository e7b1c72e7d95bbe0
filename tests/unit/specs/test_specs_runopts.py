"""Run options: declaration, resolution of dicts and of the CLI string form."""

from __future__ import annotations

import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchx_provider.errors import InvalidOptionError
from torchx_provider.specs import CfgVal, runopt, runopts


def _opts() -> runopts:
    opts = runopts()
    opts.add("queue", str, "Volcano queue", required=True)
    opts.add("namespace", str, "Kubernetes namespace", default="default")
    opts.add("priority", int, "job priority", default=0)
    opts.add("ratio", float, "a ratio", default=0.5)
    opts.add("preemptible", bool, "may be preempted", default=False)
    opts.add("copy_env", list[str], "env vars to copy")
    opts.add("labels", dict[str, str], "extra labels")
    return opts


# -- declaration -------------------------------------------------------------------------------


def test_add_and_accessors() -> None:
    opts = _opts()
    assert len(opts) == 7
    assert "queue" in opts and "nope" not in opts
    assert opts.get("queue") == runopt(None, str, True, "Volcano queue")
    assert opts.get("nope") is None
    assert [k for k, _ in opts] == [
        "queue",
        "namespace",
        "priority",
        "ratio",
        "preemptible",
        "copy_env",
        "labels",
    ]


def test_runopt_type_names() -> None:
    opts = _opts()
    names = {k: o.type_name for k, o in opts}
    assert names["queue"] == "str"
    assert names["priority"] == "int"
    assert names["copy_env"] == "list[str]"
    assert names["labels"] == "dict[str, str]"
    legacy = runopts()
    legacy.add("l", typing.List[str], "typing.List works too")  # noqa: UP006
    opt = legacy.get("l")
    assert opt is not None and opt.type_name == "list[str]"


def test_required_option_cannot_have_a_default() -> None:
    with pytest.raises(ValueError, match="cannot have a default"):
        runopts().add("x", str, "help", default="a", required=True)


def test_default_must_match_the_type() -> None:
    with pytest.raises(TypeError, match="not a int"):
        runopts().add("x", int, "help", default="3")
    with pytest.raises(TypeError):
        runopts().add("x", list[str], "help", default=[1])


def test_update_overrides_same_named_options() -> None:
    a, b = runopts(), runopts()
    a.add("x", str, "a's x", default="a")
    b.add("x", str, "b's x", default="b")
    b.add("y", int, "y")
    a.update(b)
    assert a.get("x") == runopt("b", str, False, "b's x")
    assert "y" in a


@pytest.mark.parametrize(
    ("obj", "tp", "expected"),
    [
        ("s", str, True),
        (1, str, False),
        (1, int, True),
        (True, int, False),
        (1, float, True),
        (1.5, float, True),
        (True, float, False),
        (True, bool, True),
        (1, bool, False),
        (["a"], list[str], True),
        ([], list[str], True),
        ([1], list[str], False),
        (("a",), list[str], False),
        ({"a": "b"}, dict[str, str], True),
        ({"a": 1}, dict[str, str], False),
        ("a", dict[str, str], False),
    ],
)
def test_is_type(obj: object, tp: object, expected: bool) -> None:
    assert runopts.is_type(obj, tp) is expected


# -- resolve -----------------------------------------------------------------------------------


def test_resolve_fills_defaults() -> None:
    assert _opts().resolve({"queue": "q"}) == {
        "queue": "q",
        "namespace": "default",
        "priority": 0,
        "ratio": 0.5,
        "preemptible": False,
        "copy_env": None,
        "labels": None,
    }


def test_resolve_none_means_default() -> None:
    assert _opts().resolve({"queue": "q", "namespace": None})["namespace"] == "default"


def test_resolve_converts_strings_to_the_option_type() -> None:
    resolved = _opts().resolve(
        {
            "queue": "q",
            "priority": " 7 ",
            "ratio": "2.5",
            "preemptible": "Yes",
            "copy_env": "A;B",
            "labels": "team:ml,tier:gold",
        }
    )
    assert resolved["priority"] == 7
    assert resolved["ratio"] == 2.5
    assert resolved["preemptible"] is True
    assert resolved["copy_env"] == ["A", "B"]
    assert resolved["labels"] == {"team": "ml", "tier": "gold"}


def test_resolve_accepts_harmless_near_types() -> None:
    resolved = _opts().resolve(
        {"queue": "q", "ratio": 2, "copy_env": ("A", "B"), "labels": {"n": 1}}
    )
    assert resolved["ratio"] == 2.0 and isinstance(resolved["ratio"], float)
    assert resolved["copy_env"] == ["A", "B"]
    assert resolved["labels"] == {"n": "1"}


def test_resolve_does_not_touch_the_input() -> None:
    cfg: dict[str, CfgVal] = {"queue": "q"}
    _opts().resolve(cfg)
    assert cfg == {"queue": "q"}


def test_resolve_none_cfg() -> None:
    opts = runopts()
    opts.add("x", str, "x", default="d")
    assert opts.resolve(None) == {"x": "d"}


def test_unknown_options_are_one_error_listing_valid_options() -> None:
    with pytest.raises(InvalidOptionError) as info:
        _opts().resolve({"queue": "q", "namespce": "x", "zzz": 1})
    msg = str(info.value)
    assert "['namespce', 'zzz']" in msg
    assert "did you mean 'namespace' for 'namespce'" in msg
    assert "queue (str, required)" in msg and "labels (dict[str, str])" in msg
    assert info.value.option == "namespce"


def test_missing_required_option() -> None:
    with pytest.raises(InvalidOptionError) as info:
        _opts().resolve({})
    assert info.value.option == "queue"
    assert "required run option(s) ['queue'] not set" in str(info.value)


@pytest.mark.parametrize(
    ("cfg", "option", "fragment"),
    [
        ({"priority": 1.5}, "priority", "must be a int, got float"),
        ({"priority": True}, "priority", "must be a int, got bool"),
        ({"priority": "high"}, "priority", "cannot parse 'high'"),
        ({"ratio": "fast"}, "ratio", "cannot parse 'fast'"),
        ({"preemptible": "maybe"}, "preemptible", "not one of true/false"),
        ({"preemptible": 1}, "preemptible", "must be a bool"),
        ({"copy_env": [1, 2]}, "copy_env", "must be a list[str]"),
        ({"labels": "novalue"}, "labels", "is not KEY:VALUE"),
        ({"labels": ":v"}, "labels", "is not KEY:VALUE"),
        ({"queue": 3}, "queue", "must be a str"),
    ],
)
def test_ill_typed_options(cfg: dict[str, CfgVal], option: str, fragment: str) -> None:
    with pytest.raises(InvalidOptionError) as info:
        _opts().resolve({"queue": "q", **cfg})
    assert info.value.option == option
    assert fragment in str(info.value)
    opt = _opts().get(option)
    assert opt is not None
    help_text = opt.help
    assert help_text in str(info.value)  # the error repeats what the option is for


def test_no_options_at_all() -> None:
    with pytest.raises(InvalidOptionError, match="takes no run options"):
        runopts().resolve({"x": 1})


# -- the CLI string form -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("  ", {}),
        ("queue=q", {"queue": "q"}),
        ("queue= q ", {"queue": "q"}),
        ("queue=q,priority=3", {"queue": "q", "priority": 3}),
        ("queue=q;priority=3", {"queue": "q", "priority": 3}),
        ("copy_env=A", {"copy_env": ["A"]}),
        ("copy_env=A;B", {"copy_env": ["A", "B"]}),
        ("copy_env=A,B", {"copy_env": ["A", "B"]}),
        ("copy_env=A,B,queue=q", {"copy_env": ["A", "B"], "queue": "q"}),
        ("copy_env=A;B;queue=q", {"copy_env": ["A", "B"], "queue": "q"}),
        ("copy_env=", {"copy_env": []}),
        ("labels=a:1,b:2", {"labels": {"a": "1", "b": "2"}}),
        ("labels=a:1;b:x:y", {"labels": {"a": "1", "b": "x:y"}}),
        ("labels=", {"labels": {}}),
        ("preemptible=true", {"preemptible": True}),
        ("preemptible=0", {"preemptible": False}),
        ("preemptible=NO", {"preemptible": False}),
        ("ratio=1e-3", {"ratio": 0.001}),
        ("queue=a,b", {"queue": "a,b"}),  # a str value keeps its delimiters
        ("queue=a;b", {"queue": "a;b"}),
        ("queue=''", {"queue": ""}),
        ('queue=""', {"queue": ""}),
        ("queue=a=b", {"queue": "a=b"}),
        (",queue=q,", {"queue": "q"}),
    ],
)
def test_cfg_from_str(text: str, expected: dict[str, CfgVal]) -> None:
    assert _opts().cfg_from_str(text) == expected


def test_cfg_from_str_does_not_fill_defaults_but_resolve_does() -> None:
    opts = _opts()
    parsed = opts.cfg_from_str("queue=q,copy_env=A;B")
    assert parsed == {"queue": "q", "copy_env": ["A", "B"]}
    assert opts.resolve(parsed)["namespace"] == "default"


def test_cfg_from_str_unknown_option() -> None:
    with pytest.raises(InvalidOptionError) as info:
        _opts().cfg_from_str("queue=q,namespce=x")
    assert info.value.option == "namespce"
    assert "did you mean 'namespace'" in str(info.value)
    assert "valid options are" in str(info.value)


def test_cfg_from_str_needs_key_value() -> None:
    with pytest.raises(InvalidOptionError, match="is not key=value"):
        _opts().cfg_from_str("justavalue")


def test_cfg_from_str_ill_typed() -> None:
    with pytest.raises(InvalidOptionError) as info:
        _opts().cfg_from_str("priority=high")
    assert info.value.option == "priority"


# -- help --------------------------------------------------------------------------------------


def test_repr_lists_every_option() -> None:
    text = repr(_opts())
    assert "queue (str, required)" in text
    assert "namespace (str, default: 'default')" in text
    assert "Volcano queue" in text


def test_to_markdown() -> None:
    opts = _opts()
    opts.add("pipe", str, "a | b")
    lines = opts.to_markdown().splitlines()
    assert lines[0] == "| option | type | default | description |"
    assert "| `queue` | `str` | **required** | Volcano queue |" in lines
    assert "| `priority` | `int` | `0` | job priority |" in lines
    assert "| `pipe` | `str` | `None` | a \\| b |" in lines


# -- property: the string form round-trips -----------------------------------------------------

# What the CLI form can carry: no delimiters inside items, no surrounding spaces, and no item
# that looks like the start of another option (``x=...``).
_atom = st.text(
    alphabet=st.characters(
        blacklist_characters=",;=:\n\r\t\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0",
        blacklist_categories=("Cs", "Zs", "Zl", "Zp"),
    ),
    min_size=1,
    max_size=8,
)
_value = st.text(
    alphabet=st.characters(blacklist_characters=",;=", blacklist_categories=("Cs",)),
    max_size=12,
).map(str.strip)


def _to_str(cfg: dict[str, CfgVal]) -> str:
    parts = []
    for key, value in cfg.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, list):
            text = ";".join(value)
        elif isinstance(value, dict):
            text = ",".join(f"{k}:{v}" for k, v in value.items())
        else:
            text = str(value)
        parts.append(f"{key}={text}")
    return ",".join(parts)


@settings(max_examples=200, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "queue": _value.filter(lambda v: v not in ("''", '""')),
            "priority": st.integers(),
            "ratio": st.floats(allow_nan=False, allow_infinity=False),
            "preemptible": st.booleans(),
            # one item that is only quotes reads as the empty list: not a round trip
            "copy_env": st.lists(_atom, max_size=4).filter(lambda v: v not in (["''"], ['""'])),
            "labels": st.dictionaries(_atom, _value, max_size=4),
        },
    )
)
def test_cfg_str_round_trip(cfg: dict[str, CfgVal]) -> None:
    opts = _opts()
    assert opts.cfg_from_str(_to_str(cfg)) == cfg


@settings(max_examples=100, deadline=None)
@given(st.lists(_atom, min_size=1, max_size=5), st.sampled_from([",", ";"]))
def test_list_round_trip_with_either_delimiter(items: list[str], delim: str) -> None:
    assert _opts().cfg_from_str(f"copy_env={delim.join(items)},queue=q") == {
        "copy_env": items,
        "queue": "q",
    }
