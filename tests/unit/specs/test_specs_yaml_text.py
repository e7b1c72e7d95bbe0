"""``yaml_text`` writes exactly what ``yaml.safe_dump`` writes, only faster.

Random plain data (long strings, strings with spaces, quotes, line breaks, YAML keywords,
non-ASCII, nested and empty collections, numbers) and the golden manifests are compared with
PyYAML's own dumper; the short path must be the one taken for ordinary manifests, folded
and multi-line strings included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchx_provider.specs.yaml_text import yaml_text

GOLDEN = Path(__file__).parents[1] / "schedulers" / "kube" / "golden"


def pyyaml(obj: Any) -> str:
    return str(yaml.dump(obj, Dumper=yaml.SafeDumper, sort_keys=False))


_words = st.sampled_from(
    ["", " ", "on", "yes", "null", "~", "1", "0x1f", "1e3", "-", "- a", "a: b", "#x", "'", '"',
     "\n", "a\nb", "\t", "é", "€", "${replica_id}", "--rank", "x" * 70, "status.podIP", "*a",
     "&b", "!t", "%", "@", "`", "{", "[", "|", ">", "?", ":", "a ", " a", "0", "07", "08",
     "0x1", "123", "1_0", "Yes", "NULL", "Off", "y", "n", "a/b-c.d_e", "trainer-0", "x.y:z",
     "a:b", "inf", ".inf", "nan", "=", "<<", "True", "TRUE", "tRUE"]
)  # fmt: skip
_strings = st.one_of(
    _words,
    st.lists(_words, max_size=12).map(" ".join),
    st.lists(_words, max_size=12).map("".join),
    st.text(max_size=100),
)
_scalars = st.one_of(
    _strings,
    st.from_regex(r"[A-Za-z0-9_./:-]{1,12}", fullmatch=True),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)
_data = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(_strings, st.integers(), st.booleans()), inner, max_size=4),
    ),
    max_leaves=30,
)


def dumps_of(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What ``yaml.dump`` is asked to dump from now on (the pieces of the short path, or the
    whole document when it goes to PyYAML)."""
    dumped: list[Any] = []
    real = yaml.dump

    def dump(data: Any, *args: Any, **kwargs: Any) -> Any:
        dumped.append(data)
        return real(data, *args, **kwargs)

    monkeypatch.setattr(yaml, "dump", dump)
    return dumped


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.dictionaries(_strings, _data, max_size=5), st.lists(_data, max_size=5)))
def test_same_text_as_pyyaml(obj: Any) -> None:
    assert yaml_text(obj) == pyyaml(obj)


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.yaml")), ids=lambda p: p.stem)
def test_golden_manifests_take_the_short_path(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = yaml.safe_load(path.read_text())
    dumped = dumps_of(monkeypatch)
    assert yaml_text(doc) == path.read_text()
    assert not any(d is doc for d in dumped), "the whole document went through PyYAML"


@pytest.mark.parametrize(
    "obj",
    [
        {"a": {"b": {"c": "word " * 30}}},
        {"a": [{"b": ["word " * 30, "x" * 100, "é" * 50 + " e"]}]},
        [["word " * 30, {"k" * 50: "v " * 30}]],
        {"role": '{"args":["-c","echo hello world"],' + '"env":{"A":"a b"},' * 8 + "}"},
        {"a": {"b": "line one\nline two\n", "c": ["x\ny", "  lead", "trail  "]}},
        {"-0.0": -0.0, "0.0": 0.0, "1": 1, "true": True, "float": 1e300},
    ],
)
def test_folded_multi_line_and_odd_scalars_read_as_pyyaml_writes_them(
    obj: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = pyyaml(obj)
    dumped = dumps_of(monkeypatch)
    assert yaml_text(obj) == expected
    assert not any(d is obj for d in dumped), "the whole document went through PyYAML"


@pytest.mark.parametrize("obj", [{"": 1}, {"k" * 130: 1}, {"a\nb": 1}, {"t": (1, 2)}, {}, []])
def test_what_the_short_path_cannot_vouch_for_goes_to_pyyaml(obj: Any) -> None:
    assert yaml_text(obj) == pyyaml(obj)


def test_shared_objects_are_written_twice_not_aliased() -> None:
    shared = {"a": [1]}
    assert yaml_text({"x": shared, "y": shared}) == "x:\n  a:\n  - 1\ny:\n  a:\n  - 1\n"
    # ... also when the document goes through PyYAML whole (a tuple is not plain data)
    assert "&id" not in yaml_text({"x": shared, "y": shared, "t": (1,)})
