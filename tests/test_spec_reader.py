"""The one strict spec reader: every problem names file, dotted field and the
problem in one wording."""

from __future__ import annotations

import pytest

from guardrepro.errors import InputError, LockError
from guardrepro.spec import HEX40, HEX64, Table, check_keys, load_toml, read_toml


def test_unknown_key_names_file_path_key_and_known_keys() -> None:
    table = Table({"a": 1, "zz": 2}, "spec.toml", "outer")
    assert table.take("a", int) == 1
    with pytest.raises(InputError) as info:
        table.done()
    err = info.value
    assert err.file == "spec.toml" and err.field == "outer.zz"
    assert "unknown key 'zz' (known: a)" in str(err)


def test_only_refuses_before_reading_and_suggests_a_close_key() -> None:
    table = Table({"bacth_size": 4}, "p.toml", "backend_options")
    with pytest.raises(InputError, match="did you mean 'batch_size'") as info:
        table.only("batch_size", "dtype")
    assert info.value.field == "backend_options.bacth_size"


def test_wrong_type_is_never_coerced() -> None:
    table = Table({"n": "3", "flag": 1, "count": True, "x": 2}, "f.toml")
    with pytest.raises(InputError) as info:
        table.take("n", int)
    assert info.value.field == "n" and "expected an integer, got '3'" in str(info.value)
    with pytest.raises(InputError, match="expected true or false, got 1"):
        table.take("flag", bool)
    with pytest.raises(InputError, match="expected an integer, got True"):
        table.take("count", int)
    assert table.take("x", (int, float)) == 2  # an integer is a number


def test_nested_tables_carry_the_dotted_path_and_row() -> None:
    top = Table({"outer": {"inner": {"v": [1]}}}, "n.toml", row=3, error=LockError)
    inner = top.sub("outer").sub("inner")
    with pytest.raises(LockError) as info:
        inner.take("v", str)
    err = info.value
    assert (err.file, err.row, err.field) == ("n.toml", 3, "outer.inner.v")
    assert "expected a string, got [1]" in str(err)
    with pytest.raises(LockError, match="missing key") as missing:
        inner.take("w", str)
    assert missing.value.field == "outer.inner.w"
    assert Table({}, "n.toml").take("w", str, None) is None


def test_a_non_table_is_refused_with_its_path() -> None:
    with pytest.raises(InputError) as info:
        Table({"s": 5}, "t.toml").sub("s")
    assert info.value.field == "s" and "expected a table, got 5" in str(info.value)


def test_check_keys_unknown_first_then_missing() -> None:
    with pytest.raises(InputError) as info:
        check_keys({"b": 1, "c": 2}, ("a", "b"), file="x.json", line=7, required=("a",))
    assert (info.value.line, info.value.field) == (7, "c")
    with pytest.raises(InputError, match="missing key") as missing:
        check_keys({"b": 1}, ("a", "b"), file="x.json", where="t", required=("a",))
    assert missing.value.field == "t.a"


def test_pattern_checks_the_hex_pins() -> None:
    table = Table({"rev": "A" * 40, "sha": "0" * 64}, "h.toml")
    assert table.pattern("sha", HEX64, "64 lowercase hex") == "0" * 64
    with pytest.raises(InputError, match="expected a 40-hex revision, got 'AAAA"):
        table.pattern("rev", HEX40, "a 40-hex revision")
    assert HEX40.fullmatch("0123456789abcdef" * 2 + "01234567")
    assert not HEX64.fullmatch("g" * 64)


def test_bad_toml_non_utf8_and_missing_file(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("a = = 1\n", encoding="utf-8")
    with pytest.raises(InputError, match="invalid TOML") as info:
        load_toml(bad)
    assert info.value.file == str(bad)
    latin = tmp_path / "latin.toml"
    latin.write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8") as info:
        load_toml(latin)
    assert info.value.file == str(latin)
    with pytest.raises(LockError, match="lock file not found"):
        load_toml(tmp_path / "absent.toml", "lock file", error=LockError)
    good = tmp_path / "good.toml"
    good.write_text('[t]\nx = 1\n', encoding="utf-8")
    data, text = read_toml(good)
    assert data == {"t": {"x": 1}} and text == '[t]\nx = 1\n'
