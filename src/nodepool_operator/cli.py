"""The ``nodepool-operator`` command line: the local control plane, the simulated cloud,
the operator itself, the CRDs and the demo."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from nodepool_operator.cluster import binaries, controlplane

__all__ = ["app", "main"]

app = typer.Typer(
    help="A Kubernetes operator that provisions node pools and autoscales them, "
    "with disciplined API writes.",
    no_args_is_help=True,
    add_completion=False,
)
cluster_app = typer.Typer(
    help="The local control plane: etcd, kube-apiserver, kube-scheduler, "
    "kube-controller-manager and kwok, built from Go modules and run on loopback.",
    no_args_is_help=True,
)
app.add_typer(cluster_app, name="cluster")

DirOption = Annotated[
    Path,
    typer.Option(
        "--dir",
        envvar="NODEPOOL_CLUSTER_DIR",
        help="Directory holding the control plane's state, logs, audit log and kubeconfig.",
    ),
]
DEFAULT_DIR = Path(".cluster")


@cluster_app.command("up")
def cluster_up(
    directory: DirOption = DEFAULT_DIR,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for /readyz.")] = 120.0,
) -> None:
    """Build (or reuse) the binaries, start the control plane and wait until it is ready."""
    plane = controlplane.ControlPlane(directory)
    try:
        plane.up(timeout=timeout)
    except (controlplane.ControlPlaneError, binaries.BuildError) as error:
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from error
    typer.echo(f"export KUBECONFIG={plane.kubeconfig}")


@cluster_app.command("down")
def cluster_down(directory: DirOption = DEFAULT_DIR) -> None:
    """Stop every process that ``cluster up`` started in DIR (state and logs stay)."""
    plane = controlplane.ControlPlane(directory)
    plane.down()
    left = [p for p in plane.status() if p.running]
    if left:
        typer.secho(f"error: still running: {left}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1)
    typer.echo("control plane stopped")


@cluster_app.command("status")
def cluster_status(directory: DirOption = DEFAULT_DIR) -> None:
    """Show each component's pid and whether it runs; exit 1 unless all run."""
    plane = controlplane.ControlPlane(directory)
    processes = plane.status()
    if not processes:
        typer.echo(f"no control plane recorded in {directory}")
        raise typer.Exit(1)
    for process in processes:
        typer.echo(
            f"{process.name:<24} pid {process.pid:<8} {'running' if process.running else 'stopped'}"
        )
    typer.echo(f"kubeconfig: {plane.kubeconfig}")
    if not all(p.running for p in processes):
        raise typer.Exit(1)


@cluster_app.command("build")
def cluster_build() -> None:
    """Build the control-plane binaries into the cache (a no-op when they are there)."""
    try:
        found = binaries.ensure_binaries()
    except binaries.BuildError as error:
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from error
    for name, path in sorted(found.items()):
        typer.echo(f"{name:<24} {path}")


@app.command("demo")
def demo(
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Directory for the control plane (default: a temporary one)."),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the control plane running at the end.")
    ] = False,
) -> None:
    """Bring up the local control plane, show what runs on it, and tear it down."""
    work = directory or Path(tempfile.mkdtemp(prefix="nodepool-demo-"))
    plane = controlplane.ControlPlane(work)
    try:
        plane.up()
        kubectl = binaries.ensure_binaries()["kubectl"]
        subprocess.run(
            [str(kubectl), "--kubeconfig", str(plane.kubeconfig), "get", "nodes,namespaces"],
            check=True,
        )
    except (controlplane.ControlPlaneError, binaries.BuildError) as error:
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        plane.down()
        raise typer.Exit(1) from error
    except BaseException:
        plane.down()
        raise
    if keep:
        typer.echo(f"control plane left running: export KUBECONFIG={plane.kubeconfig}")
    else:
        plane.down()


def main() -> None:
    app(prog_name="nodepool-operator")


if __name__ == "__main__":
    main()
