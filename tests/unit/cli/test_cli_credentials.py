"""The command line takes the cloud token only as a file, and an open simcloud only on request."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from nodepool_operator import cli


def test_simcloud_without_a_token_file_or_insecure_no_auth_refuses_to_start(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(cli.app, ["simcloud", "--state", str(tmp_path / "s.sqlite3")])

    assert result.exit_code == 2
    assert "--insecure-no-auth" in result.output


def test_simcloud_with_a_missing_token_file_says_which_file_and_exits_1(tmp_path: Path) -> None:
    missing = tmp_path / "absent-token"
    result = CliRunner().invoke(
        cli.app,
        ["simcloud", "--state", str(tmp_path / "s.sqlite3"), "--token-file", str(missing)],
    )

    assert result.exit_code == 1
    assert str(missing) in result.output


def test_run_with_a_missing_cloud_token_file_exits_1_before_touching_the_api(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "absent-token"
    result = CliRunner().invoke(
        cli.app,
        [
            "run",
            "--kubeconfig",
            str(tmp_path / "no-kubeconfig"),
            "--cloud-token-file",
            str(missing),
        ],
    )

    assert result.exit_code == 1
    assert str(missing) in result.output


def test_no_option_takes_the_token_itself() -> None:
    result = CliRunner().invoke(cli.app, ["run", "--help"])
    for option in ("--cloud-token ", "--token ", "--cloud-token="):
        assert option not in result.output
    assert "--cloud-token-file" in result.output
