"""Token files: read once, read again only when changed, errors and reprs without the token."""

from __future__ import annotations

import os
import pathlib

import pytest

from nodepool_operator.cloud import credentials


def test_the_token_is_stripped_and_re_read_only_when_the_file_changes(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    token = credentials.TokenFile(path)

    assert token.read() == "first"
    stat = path.stat()
    path.write_text("other\n")  # same size, and the mtime forced back: looks unchanged
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    unchanged = token.read()
    replacement = tmp_path / "token.new"
    replacement.write_text("second")
    os.replace(replacement, path)

    assert unchanged == "first"
    assert token.read() == "second"


def test_a_missing_or_empty_file_is_a_credential_error_naming_the_file(
    tmp_path: pathlib.Path,
) -> None:
    empty = tmp_path / "empty"
    empty.write_text(" \n")

    with pytest.raises(credentials.CredentialError, match="absent"):
        credentials.TokenFile(tmp_path / "absent").read()
    with pytest.raises(credentials.CredentialError, match="is empty"):
        credentials.TokenFile(empty).read()


def test_reprs_never_show_the_token(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "token"
    path.write_text("hush-hush")
    from_file = credentials.TokenFile(path)
    from_file.read()

    assert "hush-hush" not in repr(from_file)
    assert "hush-hush" not in repr(credentials.StaticToken("hush-hush"))
