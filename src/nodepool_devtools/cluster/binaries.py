"""The control-plane binaries: where they come from, where they are cached, how they are built.

No registry this project can reach ships Kubernetes server binaries, so they are built from
the Go module proxy by the wrapper modules under ``tools/``. Each module's ``go.mod`` is the
one place its version is pinned; this module reads the version from there, so the cache key,
the ``--version`` ldflags and the build can never disagree.

Lookup order for every binary:

1. ``KUBEBUILDER_ASSETS`` (a directory of envtest binaries) when it holds that binary;
2. the cache, ``$NODEPOOL_OPERATOR_CACHE`` or ``~/.cache/nodepool-operator/<module>-<version>/``;
3. a build into that cache (never repeated once the binary is there).

helm (``tools/helm``), which the chart's tests and ``docs/install.md`` use, is built the same
way by :func:`ensure_helm`; ``cluster build`` builds it too, so ``scripts/setup-env.sh`` leaves
a fresh machine with it and no test ever downloads it. It is not part of the control plane,
so :func:`ensure_binaries` (what ``cluster up`` needs) does not wait for it.

kubemark (``k8s.io/kubernetes/cmd/kubemark``), the hollow kubelet that ``simcloud --kubelets
hollow`` boots on each VM, is built from the same pinned Kubernetes module as the control plane
(``tools/kubernetes``) by :func:`ensure_kubemark`, and cached beside it; ``cluster build`` builds
it too (about 4 minutes cold), so the e2e tests on real kubelets never build it. It is not part
of the control plane either: :func:`ensure_binaries` does not wait for it.

Karpenter's kwok provider (``tools/karpenter``) is built the same way but only on request,
by :func:`ensure_karpenter_kwok` (``bench/peers.py``): it takes minutes, so neither
``cluster build``, ``scripts/setup-env.sh`` nor the tests ever ask for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

__all__ = [
    "ALL_BINARIES",
    "BuildError",
    "ClientTool",
    "ToolModule",
    "cache_root",
    "client_tools",
    "ensure_binaries",
    "ensure_helm",
    "ensure_karpenter_kwok",
    "ensure_kubemark",
    "pinned_version",
    "source_path",
    "tools_directory",
]

CACHE_ENV = "NODEPOOL_OPERATOR_CACHE"
ASSETS_ENV = "KUBEBUILDER_ASSETS"
TOOLS_ENV = "NODEPOOL_OPERATOR_TOOLS"
HEARTBEAT_SECONDS = 30.0


class BuildError(RuntimeError):
    """A step of the control-plane build failed; the message names the step and a remedy."""


@dataclass(frozen=True)
class ToolModule:
    """One Go wrapper module under ``tools/`` and the commands it builds."""

    directory: str
    pinned_module: str
    commands: dict[str, str]  # binary name -> Go package path

    def version(self, tools: Path) -> str:
        return pinned_version(tools / self.directory / "go.mod", self.pinned_module)

    def ldflags(self, version: str) -> str:
        flags = ["-s", "-w"]
        if self.directory == "kubernetes":
            major, minor = version.lstrip("v").split(".")[:2]
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
                flags += [
                    f"-X {pkg}.gitVersion={version}",
                    f"-X {pkg}.gitMajor={major}",
                    f"-X {pkg}.gitMinor={minor}",
                    f"-X {pkg}.gitTreeState=clean",
                    f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
                ]
        elif self.directory == "etcd":
            flags.append(f"-X go.etcd.io/etcd/api/v3/version.GitSHA={version}")
        elif self.directory == "kwok":
            flags.append(f"-X sigs.k8s.io/kwok/pkg/consts.Version={version}")
        elif self.directory == "helm":
            flags.append(f"-X helm.sh/helm/v3/internal/version.version={version}")
            # The Kubernetes version `helm template` assumes without a cluster (else 1.20,
            # below the chart's kubeVersion): that of its client-go, as helm's Makefile sets.
            client_go = pinned_version(tools_directory() / "helm" / "go.mod", "k8s.io/client-go")
            minor = client_go.lstrip("v").split(".")[1]
            for pkg in ("helm.sh/helm/v3/pkg/chartutil", "helm.sh/helm/v3/pkg/lint/rules"):
                flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={minor}"]
        elif self.directory == "karpenter":
            # Also its user agent (karpenter/<version>), which the audit log records.
            flags.append(f"-X sigs.k8s.io/karpenter/pkg/operator.Version={version}")
        return " ".join(flags)


KUBERNETES = ToolModule(
    directory="kubernetes",
    pinned_module="k8s.io/kubernetes",
    commands={
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    },
)
ETCD = ToolModule(
    directory="etcd", pinned_module="go.etcd.io/etcd/server/v3", commands={"etcd": "."}
)
KWOK = ToolModule(
    directory="kwok",
    pinned_module="sigs.k8s.io/kwok",
    commands={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
)
# Not in MODULES: a peer for bench/peers.py only, never part of the control plane.
KARPENTER = ToolModule(
    directory="karpenter",
    pinned_module="sigs.k8s.io/karpenter",
    commands={"kwok": "sigs.k8s.io/karpenter/kwok"},
)
# Not in MODULES either: a client for charts/, not a part of the control plane.
HELM = ToolModule(
    directory="helm",
    pinned_module="helm.sh/helm/v3",
    commands={"helm": "helm.sh/helm/v3/cmd/helm"},
)
# Not in MODULES either: each simcloud VM's kubelet, built from the control plane's own module
# (so its version ldflags and cache directory are those of KUBERNETES).
KUBEMARK = ToolModule(
    directory="kubernetes",
    pinned_module="k8s.io/kubernetes",
    commands={"kubemark": "k8s.io/kubernetes/cmd/kubemark"},
)
MODULES = (ETCD, KWOK, KUBERNETES)
ALL_BINARIES = tuple(name for module in MODULES for name in module.commands)


def pinned_version(go_mod: Path, module: str) -> str:
    """The version ``go.mod`` requires for ``module`` (``require X vN`` or inside a block)."""
    text = go_mod.read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if match is None:
        raise BuildError(f"{go_mod} does not require {module}; the pin is missing")
    return match.group(1)


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        # Absolute: processes are started (and builds run) from other working directories.
        return Path(override).expanduser().resolve()
    return Path.home() / ".cache" / "nodepool-operator"


def source_path(relative: str) -> Path:
    """A path of the source checkout (``tools/...``, ``deploy/...``) this package runs from:
    the development tools are never installed from a wheel, so the checkout is always there
    (``src/nodepool_devtools/cluster/`` is three levels below its root)."""
    return Path(__file__).resolve().parents[3] / relative


def tools_directory() -> Path:
    """``tools/`` of the source checkout (``NODEPOOL_OPERATOR_TOOLS`` overrides it)."""
    override = os.environ.get(TOOLS_ENV)
    if override:
        return Path(override)
    return source_path("tools")


def ensure_karpenter_kwok(*, out: TextIO = sys.stderr) -> Path:
    """Karpenter's kwok provider binary, built into the cache on first use (minutes)."""
    return _ensure_single_tool(KARPENTER, out=out)


def ensure_helm(*, out: TextIO = sys.stderr) -> Path:
    """The pinned helm binary (``KUBEBUILDER_ASSETS`` first, then the cache, then a build)."""
    return _given_or_ensured(HELM, out=out)


def ensure_kubemark(*, out: TextIO = sys.stderr) -> Path:
    """The hollow kubelet, kubemark, of the pinned Kubernetes (``KUBEBUILDER_ASSETS`` first,
    then the cache, then a build: about 4 minutes cold)."""
    return _given_or_ensured(KUBEMARK, out=out)


def _given_or_ensured(module: ToolModule, *, out: TextIO) -> Path:
    assets = os.environ.get(ASSETS_ENV)
    if assets:
        candidate = Path(assets).expanduser().resolve() / next(iter(module.commands))
        if _is_executable(candidate):
            return candidate
    return _ensure_single_tool(module, out=out)


@dataclass(frozen=True)
class ClientTool:
    """A command-line client of the local control plane: where it is (None: not built yet)
    and the version it was built at (None: given by ``KUBEBUILDER_ASSETS``)."""

    name: str
    path: Path | None
    version: str | None


def client_tools() -> list[ClientTool]:
    """kubectl (the API server's own version: a system kubectl may be older) and helm, as
    the cache or ``KUBEBUILDER_ASSETS`` hold them; nothing is built here."""
    found: list[ClientTool] = []
    assets = os.environ.get(ASSETS_ENV)
    for module, name in ((KUBERNETES, "kubectl"), (HELM, "helm")):
        if assets and _is_executable(Path(assets).expanduser().resolve() / name):
            found.append(ClientTool(name, Path(assets).expanduser().resolve() / name, None))
            continue
        tools = tools_directory()
        if not (tools / module.directory / "go.mod").is_file():
            found.append(ClientTool(name, None, None))
            continue
        version = module.version(tools)
        path = cache_root() / f"{module.directory}-{version}" / name
        found.append(ClientTool(name, path if _is_executable(path) else None, version))
    return found


def _ensure_single_tool(module: ToolModule, *, out: TextIO) -> Path:
    tools = tools_directory()
    if not (tools / module.directory / "go.mod").is_file():
        raise BuildError(f"no tools/{module.directory} at {tools}; run from a source checkout")
    version = module.version(tools)
    target = cache_root() / f"{module.directory}-{version}"
    names = list(module.commands)
    if not all(_is_executable(target / name) for name in names):
        _build(module=module, version=version, names=names, target=target, out=out)
    return target / names[0]


def ensure_binaries(*, out: TextIO = sys.stderr) -> dict[str, Path]:
    """Return a path for every control-plane binary, building what is neither given nor cached."""
    tools = tools_directory()
    found: dict[str, Path] = {}
    assets = os.environ.get(ASSETS_ENV)
    for module in MODULES:
        missing = dict(module.commands)
        if assets:
            for name in list(missing):
                candidate = Path(assets).expanduser().resolve() / name
                if _is_executable(candidate):
                    found[name] = candidate
                    del missing[name]
        if not missing:
            continue
        if not (tools / module.directory / "go.mod").is_file():
            raise BuildError(
                f"no cached {', '.join(missing)} and no tools/ checkout at {tools} to build them; "
                f"run from a source checkout, set {TOOLS_ENV}, or point {ASSETS_ENV} at binaries"
            )
        version = module.version(tools)
        target = cache_root() / f"{module.directory}-{version}"
        if not all(_is_executable(target / name) for name in missing):
            _build(module=module, version=version, names=list(missing), target=target, out=out)
        found.update({name: target / name for name in missing})
    return found


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    # Two test sessions starting at once must not build the same binaries side by side.
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(
    *, module: ToolModule, version: str, names: list[str], target: Path, out: TextIO
) -> None:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "building the control plane needs the Go toolchain (go) on PATH; "
            f"install Go 1.26+ or set {ASSETS_ENV} to a directory with the binaries"
        )
    with _exclusive(cache_root() / f".{module.directory}.lock"):
        if all(_is_executable(target / name) for name in names):
            return  # another process built them while we waited for the lock
        source = tools_directory() / module.directory
        packages = [module.commands[name] for name in names]
        print(
            f"[build] {module.pinned_module} {version}: {', '.join(names)} "
            f"(cold builds take minutes; cached in {target})",
            file=out,
            flush=True,
        )
        started = time.monotonic()
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as staging:
            command = [go, "build", "-trimpath", "-ldflags", module.ldflags(version)]
            command += ["-o", staging + os.sep, *packages]
            log = _run_with_heartbeat(command, cwd=source, label=module.directory, out=out)
            target.mkdir(parents=True, exist_ok=True)
            for name in names:
                built = Path(staging) / name
                if not built.is_file():
                    raise BuildError(
                        f"go build of {module.directory} finished but produced no {name}\n{log}"
                    )
                # Rename is atomic, so a reader never sees a half-written binary.
                os.replace(built, target / name)
        print(
            f"[build] {module.directory} done in {time.monotonic() - started:.0f}s",
            file=out,
            flush=True,
        )


def _run_with_heartbeat(command: list[str], *, cwd: Path, label: str, out: TextIO) -> str:
    started = time.monotonic()
    finished = threading.Event()

    def heartbeat() -> None:
        while not finished.wait(HEARTBEAT_SECONDS):
            elapsed = time.monotonic() - started
            print(f"[build] {label}: still compiling ({elapsed:.0f}s)", file=out, flush=True)

    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    try:
        result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    finally:
        finished.set()
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0:
        tail = "\n".join(output.splitlines()[-30:])
        raise BuildError(
            f"step 'go build' in tools/{label} failed (exit {result.returncode}):\n{tail}\n"
            "what to try: check that the Go module proxy is reachable (go env GOPROXY), that "
            f"there is free disk space for the Go caches, or set {ASSETS_ENV} to a directory "
            "holding prebuilt binaries"
        )
    return output
