"""Where control-plane binaries come from: pins in go.mod, KUBEBUILDER_ASSETS, the cache."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from nodepool_devtools.cluster import binaries


def _fake_tools(root: Path) -> Path:
    tools = root / "tools"
    for module, pin in (
        ("kubernetes", "require k8s.io/kubernetes v1.99.1"),
        ("etcd", "require go.etcd.io/etcd/server/v3 v3.9.9"),
        ("kwok", "require (\n\tsigs.k8s.io/kwok v0.42.0\n)"),
    ):
        (tools / module).mkdir(parents=True)
        (tools / module / "go.mod").write_text(f"module example/{module}\n\ngo 1.26.0\n\n{pin}\n")
    return tools


def _executable(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_pinned_version_is_read_from_a_require_line_or_block(tmp_path: Path) -> None:
    tools = _fake_tools(tmp_path)
    assert binaries.KUBERNETES.version(tools) == "v1.99.1"
    assert binaries.KWOK.version(tools) == "v0.42.0"


def test_missing_pin_is_a_clear_build_error(tmp_path: Path) -> None:
    go_mod = tmp_path / "go.mod"
    go_mod.write_text("module example\n")
    with pytest.raises(binaries.BuildError, match=r"does not require k8s\.io/kubernetes"):
        binaries.pinned_version(go_mod, "k8s.io/kubernetes")


def test_version_ldflags_make_version_flags_tell_the_truth() -> None:
    flags = binaries.KUBERNETES.ldflags("v1.36.3")
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in flags
    assert "-X k8s.io/component-base/version.gitMinor=36" in flags
    assert "consts.Version=v0.8.0" in binaries.KWOK.ldflags("v0.8.0")


def test_cached_and_given_binaries_are_used_without_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = _fake_tools(tmp_path)
    cache = tmp_path / "cache"
    assets = tmp_path / "assets"
    for name in ("kube-apiserver", "etcd", "kubectl"):  # what envtest ships
        _executable(assets / name)
    for name in ("kube-scheduler", "kube-controller-manager"):
        _executable(cache / "kubernetes-v1.99.1" / name)
    _executable(cache / "kwok-v0.42.0" / "kwok")
    monkeypatch.setenv(binaries.TOOLS_ENV, str(tools))
    monkeypatch.setenv(binaries.CACHE_ENV, str(cache))
    monkeypatch.setenv(binaries.ASSETS_ENV, str(assets))
    monkeypatch.setenv("PATH", "/nonexistent")  # proves no `go build` could have run

    found = binaries.ensure_binaries()

    assert found["kube-apiserver"] == assets / "kube-apiserver"
    assert found["etcd"] == assets / "etcd"
    assert found["kube-scheduler"] == cache / "kubernetes-v1.99.1" / "kube-scheduler"
    assert found["kwok"] == cache / "kwok-v0.42.0" / "kwok"
    assert all(os.access(path, os.X_OK) for path in found.values())


@pytest.mark.parametrize("ensure", [binaries.ensure_binaries, binaries.ensure_kubemark])
def test_missing_go_toolchain_says_what_to_do(
    ensure: Callable[[], object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(binaries.TOOLS_ENV, str(_fake_tools(tmp_path)))
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path / "empty-cache"))
    monkeypatch.delenv(binaries.ASSETS_ENV, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(binaries.BuildError, match="needs the Go toolchain"):
        ensure()


def test_kubemark_is_cached_beside_the_control_plane_of_the_same_kubernetes_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    _executable(cache / "kubernetes-v1.99.1" / "kubemark")
    monkeypatch.setenv(binaries.TOOLS_ENV, str(_fake_tools(tmp_path)))
    monkeypatch.setenv(binaries.CACHE_ENV, str(cache))
    monkeypatch.delenv(binaries.ASSETS_ENV, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")  # proves no `go build` could have run

    assert binaries.ensure_kubemark() == cache / "kubernetes-v1.99.1" / "kubemark"
    assert binaries.KUBEMARK.ldflags("v1.99.1") == binaries.KUBERNETES.ldflags("v1.99.1")


def test_kubemark_given_in_kubebuilder_assets_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = tmp_path / "assets"
    _executable(assets / "kubemark")
    monkeypatch.setenv(binaries.TOOLS_ENV, str(_fake_tools(tmp_path)))
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path / "empty-cache"))
    monkeypatch.setenv(binaries.ASSETS_ENV, str(assets))
    monkeypatch.setenv("PATH", "/nonexistent")

    assert binaries.ensure_kubemark() == assets / "kubemark"
