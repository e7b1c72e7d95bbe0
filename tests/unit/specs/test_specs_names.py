"""Names and handles: random ids, unique app ids, RFC 1123 names, app handles."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchx_provider.errors import InvalidAppError
from torchx_provider.specs import (
    ParsedAppHandle,
    is_rfc1123_name,
    make_app_handle,
    make_unique,
    normalize_rfc1123_name,
    parse_app_handle,
    random_id,
)
from torchx_provider.specs.names import MAX_NAME_LEN, read_app_handle, short_hash

RFC1123 = re.compile(r"[a-z]([a-z0-9-]*[a-z0-9])?")
PROPS = settings(max_examples=100, deadline=None)

# -- random ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 2, 8, 20])
def test_random_id_shape(length: int) -> None:
    value = random_id(length)
    assert len(value) == length
    assert re.fullmatch(r"[a-z][a-z0-9]*", value)


def test_random_id_default_and_randomness() -> None:
    assert len(random_id()) == 8
    assert len({random_id() for _ in range(50)}) == 50


@pytest.mark.parametrize("length", [0, -1])
def test_random_id_rejects_non_positive_length(length: int) -> None:
    with pytest.raises(ValueError, match="length"):
        random_id(length)


def test_make_unique() -> None:
    value = make_unique("trainer")
    assert re.fullmatch(r"trainer-[a-z][a-z0-9]{7}", value)
    assert make_unique("trainer") != make_unique("trainer")
    assert re.fullmatch(r"app-[a-z][a-z0-9]{3}", make_unique("app", 4))
    # TorchX's make_unique(name, 0) means "default length".
    assert re.fullmatch(r"app-[a-z][a-z0-9]{7}", make_unique("app", 0))


def test_short_hash_is_stable_hex() -> None:
    assert short_hash("x") == short_hash("x")
    assert short_hash("x") != short_hash("y")
    assert re.fullmatch(r"[0-9a-f]{6}", short_hash("x"))
    assert len(short_hash("x", 10)) == 10
    assert short_hash("\ud800")  # lone surrogates hash too


# -- RFC 1123 names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("trainer", "trainer"),
        ("My_Role.v2", "my-role-v2"),
        ("a__b--c", "a-b--c"),
        ("--edge--", "edge"),
        ("0trainer", "x0trainer"),
        ("1", "x1"),
        ("Élan", "lan"),
    ],
)
def test_normalize_examples(name: str, expected: str) -> None:
    assert normalize_rfc1123_name(name) == expected


def test_normalize_empty_and_symbol_only_names_get_a_hash() -> None:
    assert normalize_rfc1123_name("") == "x" + short_hash("")
    assert normalize_rfc1123_name("___") == "x" + short_hash("___")
    assert normalize_rfc1123_name("!!!") != normalize_rfc1123_name("???")


def test_normalize_long_names_are_cut_with_a_hash() -> None:
    long = "trainer-" * 20
    out = normalize_rfc1123_name(long)
    assert len(out) <= MAX_NAME_LEN
    assert out.endswith("-" + short_hash(long))
    assert out.startswith("trainer-trainer")


def test_normalize_exactly_63_is_kept_but_64_is_hashed() -> None:
    assert normalize_rfc1123_name("a" * 63) == "a" * 63
    assert normalize_rfc1123_name("a" * 63 + "_") != "a" * 63
    assert normalize_rfc1123_name("a" * 63 + "-") != "a" * 63


def test_normalize_custom_max_len() -> None:
    out = normalize_rfc1123_name("abcdefghijklmnop", max_len=10)
    assert len(out) <= 10 and is_rfc1123_name(out, max_len=10)
    with pytest.raises(ValueError, match="max_len"):
        normalize_rfc1123_name("abc", max_len=7)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("a", True),
        ("a-b-1", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("", False),
        ("-a", False),
        ("a-", False),
        ("1a", False),  # we require a leading letter (RFC 1035) for every object
        ("A", False),
        ("a_b", False),
        ("a.b", False),
        ("a\n", False),
    ],
)
def test_is_rfc1123_name(name: str, valid: bool) -> None:
    assert is_rfc1123_name(name) is valid


@PROPS
@given(st.text())
def test_normalize_is_always_valid_short_and_stable(name: str) -> None:
    out = normalize_rfc1123_name(name)
    assert RFC1123.fullmatch(out), out
    assert len(out) <= MAX_NAME_LEN
    assert not out.endswith("-")
    assert is_rfc1123_name(out)
    assert normalize_rfc1123_name(name) == out  # stable
    assert normalize_rfc1123_name(out) == out  # idempotent: valid names are unchanged


@PROPS
@given(st.from_regex(RFC1123, fullmatch=True).filter(lambda s: len(s) <= MAX_NAME_LEN))
def test_valid_names_are_unchanged(name: str) -> None:
    assert normalize_rfc1123_name(name) == name


@PROPS
@given(
    prefix=st.text(min_size=MAX_NAME_LEN, max_size=120),
    a=st.text(max_size=20),
    b=st.text(max_size=20),
)
def test_distinct_names_sharing_a_long_prefix_stay_distinct(prefix: str, a: str, b: str) -> None:
    if a == b:
        return
    assert normalize_rfc1123_name(prefix + a) != normalize_rfc1123_name(prefix + b)


@PROPS
@given(
    prefix=st.text(alphabet="abcdefghij-_.", min_size=MAX_NAME_LEN, max_size=80),
    a=st.text(alphabet="abc-_", max_size=5),
    b=st.text(alphabet="abc-_", max_size=5),
)
def test_distinct_names_sharing_a_long_prefix_stay_distinct_near_the_limit(
    prefix: str, a: str, b: str
) -> None:
    # The same property, with inputs that mostly survive normalization and sit near the cut.
    if a != b:
        assert normalize_rfc1123_name(prefix + a) != normalize_rfc1123_name(prefix + b)


@PROPS
@given(st.text(), st.integers(min_value=8, max_value=80))
def test_normalize_respects_max_len(name: str, max_len: int) -> None:
    out = normalize_rfc1123_name(name, max_len=max_len)
    assert len(out) <= max_len and is_rfc1123_name(out, max_len=max_len)


# -- app handles -------------------------------------------------------------------------------


def test_make_app_handle() -> None:
    assert make_app_handle("volcano", "airflow", "default:job-1") == (
        "volcano://airflow/default:job-1"
    )
    assert make_app_handle("local_docker", "", "echo-x") == "local_docker:///echo-x"


def test_parse_app_handle_is_a_named_tuple() -> None:
    parsed = parse_app_handle("volcano://airflow/default:job-1")
    assert parsed == ParsedAppHandle("volcano", "airflow", "default:job-1")
    assert parsed.scheduler_backend == "volcano"
    assert parsed.session_name == "airflow"
    assert parsed.app_id == "default:job-1"
    scheduler, session, app_id = parsed
    assert (scheduler, session, app_id) == ("volcano", "airflow", "default:job-1")


def test_parse_app_handle_edge_forms() -> None:
    assert parse_app_handle("  mcad://s/ns:a  ") == ("mcad", "s", "ns:a")
    assert parse_app_handle("k8s://s/a/b") == ("k8s", "s/a", "b")  # TorchX: the last '/'
    assert parse_app_handle("k8s://s/a/") == ("k8s", "s", "a/")


@pytest.mark.parametrize(
    "handle",
    [
        "",
        "echo-x",
        "volcano:/s/a",
        "volcano://s",
        "volcano://s/",
        "://s/a",
        "local_docker:///echo-x",
        3,
    ],
)
def test_parse_app_handle_rejects_malformed(handle: Any) -> None:
    with pytest.raises(InvalidAppError) as info:
        parse_app_handle(handle)
    assert info.value.field == "app_handle"
    assert str(info.value) == (
        f"{handle} is not of the form: <scheduler_backend>://<session_name>/<app_id>"
    )


@pytest.mark.parametrize(
    ("handle", "reason"),
    [
        ("vol cano://s/a", "scheduler 'vol cano' is not letters, digits, '_' and '-'"),
        ("a://b://c/d", "scheduler 'a://b' is not letters, digits, '_' and '-'"),
        ("k8s://s/a\nb", "it holds a line break"),
    ],
)
def test_handles_torchx_would_misread_are_refused_with_the_reason(handle: str, reason: str) -> None:
    for parse in (parse_app_handle, read_app_handle):
        with pytest.raises(InvalidAppError) as info:
            parse(handle)
        assert str(info.value).endswith(f"<app_id>: {reason}")


def test_read_app_handle_reads_the_operators_handles_with_an_empty_session() -> None:
    assert read_app_handle("local_docker:///echo-x") == ("local_docker", "", "echo-x")
    assert read_app_handle("k8s://s/ns:a") == parse_app_handle("k8s://s/ns:a")
    with pytest.raises(InvalidAppError, match="<app_id>: it holds a line break"):
        read_app_handle("k8s:///a\nb")
    for handle in ("", "echo-x", "k8s://s/", "://s/a", "k8s:///"):
        with pytest.raises(InvalidAppError):
            read_app_handle(handle)


@PROPS
@given(
    scheduler=st.from_regex(r"[A-Za-z0-9_\-]+", fullmatch=True),
    session=st.text(alphabet=st.characters(blacklist_characters="/\n\r")).map(str.strip),
    app_id=st.text(
        alphabet=st.characters(
            blacklist_categories=("Cs", "Zs", "Cc", "Zl", "Zp"), blacklist_characters="/"
        ),
        min_size=1,
    ),
)
def test_app_handle_round_trip(scheduler: str, session: str, app_id: str) -> None:
    handle = make_app_handle(scheduler, session, app_id)
    assert read_app_handle(handle) == (scheduler, session, app_id)
    if session:
        assert parse_app_handle(handle) == (scheduler, session, app_id)
    else:
        with pytest.raises(InvalidAppError):
            parse_app_handle(handle)
