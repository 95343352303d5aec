"""deploy/ as a user installs it: `kubectl kustomize`, then `kubectl apply -k deploy/` on the
real API server, first as a server-side dry run with strict field validation (the server's
own schemas and Pod Security admission judge every object), then for real.

The Pods cannot run here (there is no image in the local control plane), so the tests
look at the objects, and at the Pods only as far as admission: the ReplicaSet is allowed
to create them in a namespace that enforces the "restricted" Pod Security Standard.

Cleanup deletes only what no other test uses: tests/e2e create the nodepool-system
namespace, the ClusterRole, the leader-election Role and the CRDs in the same control
plane, and deleting a CRD would delete their objects, so those stay.
"""

from __future__ import annotations

import asyncio
import os
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from harness import wait_for
from nodepool_devtools.cluster import binaries
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.api import crds

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"
NAMESPACE = "nodepool-system"
ACCOUNT = f"system:serviceaccount:{NAMESPACE}:nodepool-operator"
SHARED_KINDS = frozenset({"Namespace", "CustomResourceDefinition", "ClusterRole", "Role"})
POD_SELECTOR = "app.kubernetes.io/name=nodepool-operator,app.kubernetes.io/component=controller"


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Kubectl:
    binary: Path
    kubeconfig: Path | None = None

    async def __call__(self, *args: str, stdin: str | None = None) -> Completed:
        config = ["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else []
        process = await asyncio.create_subprocess_exec(
            str(self.binary),
            *config,
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(
            process.communicate(stdin.encode() if stdin is not None else None), timeout=120
        )
        assert process.returncode is not None
        return Completed(process.returncode, stdout.decode(), stderr.decode())

    async def render(self, directory: Path) -> list[dict[str, Any]]:
        rendered = await self("kustomize", str(directory))
        assert rendered.returncode == 0, rendered.stderr
        return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def _key(obj: dict[str, Any]) -> tuple[str, str | None, str]:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def _one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [obj for obj in objects if obj["kind"] == kind]
    return found


def _overlay(directory: Path, *bases: Path, body: str) -> Path:
    """A kustomization in ``directory`` on top of ``bases`` (kustomize wants relative paths)."""
    directory.mkdir(parents=True, exist_ok=True)
    head = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
    resources = "".join(f"  - {os.path.relpath(base, directory)}\n" for base in bases)
    (directory / "kustomization.yaml").write_text(head + resources + textwrap.dedent(body))
    return directory


@pytest.fixture(scope="session")
def local_kubectl() -> Kubectl:
    """kubectl without a cluster: enough for `kubectl kustomize`."""
    return Kubectl(binaries.ensure_binaries()["kubectl"])


@pytest.fixture(scope="module")
async def kubectl(local_kubectl: Kubectl, cluster: Cluster) -> Kubectl:
    """kubectl on the session's cluster, with the operator's namespace in place.

    A server-side dry run creates nothing, so the namespaced objects of a dry run need the
    namespace to exist already (on a fresh cluster too: apply deploy/namespace.yaml first).
    """
    bound = Kubectl(local_kubectl.binary, cluster.kubeconfig)
    created = await bound("apply", "-f", str(DEPLOY / "namespace.yaml"))
    assert created.returncode == 0, created.stderr
    return bound


# --- rendering (no cluster needed) -------------------------------------------------------


async def test_the_install_renders_to_exactly_the_operators_objects(local_kubectl: Kubectl) -> None:
    objects = await local_kubectl.render(DEPLOY)
    config = _one(objects, "ConfigMap")
    assert config["metadata"]["name"].startswith("nodepool-operator-config-")  # content hash
    assert sorted(map(_key, objects), key=str) == sorted(
        [
            ("Namespace", None, NAMESPACE),
            ("CustomResourceDefinition", None, "autoscalers.nodepool.dev"),
            ("CustomResourceDefinition", None, "nodepools.nodepool.dev"),
            ("CustomResourceDefinition", None, "scalerequests.nodepool.dev"),
            ("ServiceAccount", NAMESPACE, "nodepool-operator"),
            ("ClusterRole", None, "nodepool-operator"),
            ("ClusterRole", None, "nodepool-operator-metrics-reader"),
            ("ClusterRoleBinding", None, "nodepool-operator"),
            ("Role", NAMESPACE, "nodepool-operator-leader-election"),
            ("RoleBinding", NAMESPACE, "nodepool-operator-leader-election"),
            ("ConfigMap", NAMESPACE, config["metadata"]["name"]),
            ("Service", NAMESPACE, "nodepool-operator-metrics"),
            ("Deployment", NAMESPACE, "nodepool-operator"),
        ],
        key=str,
    )
    # The Namespace comes first, the CRDs before anything else, so one apply installs all.
    assert [obj["kind"] for obj in objects[:2]] == ["Namespace", "CustomResourceDefinition"]
    [env] = [
        e
        for e in _one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
        if e["name"] == "CLOUD_ENDPOINT"
    ]
    assert env["valueFrom"]["configMapKeyRef"]["name"] == config["metadata"]["name"]
    for obj in objects:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "nodepool-operator"


async def test_the_crds_base_alone_renders_the_crds_of_the_code(local_kubectl: Kubectl) -> None:
    objects = await local_kubectl.render(DEPLOY / "crds")
    for obj in objects:
        labels = obj["metadata"].pop("labels")
        assert labels == {
            "app.kubernetes.io/part-of": "nodepool-operator",
            "app.kubernetes.io/managed-by": "kustomize",
        }
    assert objects == crds.all_crds()


async def test_an_overlay_sets_the_image_and_the_cloud_endpoint(
    local_kubectl: Kubectl, tmp_path: Path
) -> None:
    # The overlay the README shows for a real cluster, with the simulated cloud added.
    overlay = _overlay(
        tmp_path / "overlay",
        DEPLOY,
        DEPLOY / "simcloud",
        body="""\
        images:
          - name: nodepool-operator
            newName: registry.example.com/platform/nodepool-operator
            newTag: 0.1.0
        configMapGenerator:
          - name: nodepool-operator-config
            namespace: nodepool-system
            behavior: merge
            literals:
              - CLOUD_ENDPOINT=https://cloud-api.example.internal:8787
        """,
    )
    objects = await local_kubectl.render(overlay)
    config = _one(objects, "ConfigMap")
    assert config["data"] == {"CLOUD_ENDPOINT": "https://cloud-api.example.internal:8787"}
    deployments = [obj for obj in objects if obj["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {"nodepool-operator", "simcloud"}
    for deployment in deployments:
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "registry.example.com/platform/nodepool-operator:0.1.0"
    operator = next(d for d in deployments if d["metadata"]["name"] == "nodepool-operator")
    [container] = operator["spec"]["template"]["spec"]["containers"]
    [ref] = [
        e["valueFrom"]["configMapKeyRef"] for e in container["env"] if e["name"] == "CLOUD_ENDPOINT"
    ]
    assert ref["name"] == config["metadata"]["name"]  # new hash: a changed endpoint rolls Pods


# --- the API server's judgement ------------------------------------------------------------


@pytest.mark.parametrize("base", ["deploy", "deploy/simcloud"])
async def test_a_server_dry_run_with_strict_validation_accepts_every_object(
    kubectl: Kubectl, base: str
) -> None:
    result = await kubectl("apply", "-k", str(REPO / base), "--dry-run=server", "--validate=strict")
    assert result.returncode == 0, result.stderr
    # Pod Security admission only warns about a Deployment's template; make that fatal.
    assert "PodSecurity" not in result.stderr, result.stderr
    assert "unknown field" not in result.stderr, result.stderr
    objects = await kubectl.render(REPO / base)
    assert len(result.stdout.splitlines()) == len(objects), result.stdout
    assert all(line.endswith("(server dry run)") for line in result.stdout.splitlines())


@pytest.mark.parametrize(
    ("patch", "refused", "message"),
    [
        pytest.param(
            "/spec/template/spec/containers/0/livenessProbe/httpGett",
            True,
            'unknown field "spec.template.spec.containers[0].livenessProbe.httpGett"',
            id="unknown-field",
        ),
        pytest.param(
            "/spec/template/spec/containers/0/securityContext/allowPrivilegeEscalation",
            False,
            'would violate PodSecurity "restricted',
            id="privilege-escalation",
        ),
    ],
)
async def test_the_dry_run_does_catch_a_broken_manifest(
    kubectl: Kubectl, tmp_path: Path, patch: str, refused: bool, message: str
) -> None:
    # The control for the test above: the same command on a broken Deployment.
    value = "{path: /healthz}" if patch.endswith("httpGett") else "true"
    overlay = _overlay(
        tmp_path / "broken",
        DEPLOY / "manager",
        body=f"""\
        patches:
          - target: {{kind: Deployment, name: nodepool-operator}}
            patch: |-
              - op: add
                path: {patch}
                value: {value}
        """,
    )
    result = await kubectl("apply", "-k", str(overlay), "--dry-run=server", "--validate=strict")
    assert (result.returncode != 0) is refused, result
    assert message in result.stderr, result.stderr


# --- a real install ------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def installed(
    kubectl: Kubectl, api_client: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[list[dict[str, Any]]]:
    """`kubectl apply -k deploy/`; afterwards, delete what this module alone created."""
    objects = await kubectl.render(DEPLOY)
    own = [obj for obj in objects if obj["kind"] not in SHARED_KINDS]
    apps = client.AppsV1Api(api_client)
    try:
        await apps.read_namespaced_deployment("nodepool-operator", NAMESPACE)
    except ApiException as error:
        if error.status != 404:
            raise
    else:
        pytest.skip("an operator is installed in this cluster already; not touching it")
    own_file = tmp_path_factory.mktemp("deploy") / "own.yaml"
    own_file.write_text(yaml.safe_dump_all(own))
    try:
        applied = await kubectl("apply", "-k", str(DEPLOY))
        assert applied.returncode == 0, applied.stderr
        yield objects
    finally:
        deleted = await kubectl(
            "delete",
            "-f",
            str(own_file),
            "--ignore-not-found",
            "--cascade=foreground",
            "--wait",
            "--timeout=90s",
        )
        assert deleted.returncode == 0, deleted.stderr
        pods = await client.CoreV1Api(api_client).list_namespaced_pod(
            NAMESPACE, label_selector=POD_SELECTOR
        )
        assert pods.items == []


async def test_apply_installs_the_operator_and_its_pods_pass_admission(
    installed: list[dict[str, Any]], api_client: client.ApiClient
) -> None:
    apps = client.AppsV1Api(api_client)
    deployment = await apps.read_namespaced_deployment("nodepool-operator", NAMESPACE)
    assert deployment.spec.replicas == 2
    pod = deployment.spec.template.spec
    assert pod.service_account_name == "nodepool-operator"
    assert pod.security_context.run_as_non_root is True
    assert pod.security_context.seccomp_profile.type == "RuntimeDefault"
    [container] = pod.containers
    assert container.security_context.read_only_root_filesystem is True
    assert container.liveness_probe.http_get.path == "/healthz"
    assert container.readiness_probe.http_get.path == "/readyz"
    assert "--leader-elect" in container.args

    async def both_pods_admitted() -> bool:
        current = await apps.read_namespaced_deployment("nodepool-operator", NAMESPACE)
        failures = [c for c in current.status.conditions or [] if c.type == "ReplicaFailure"]
        assert failures == [], failures  # e.g. Pod Security admission refused the Pods
        return bool(current.status.replicas == 2)

    # The ReplicaSet controller created both Pods in a namespace enforcing "restricted";
    # they stay Pending (no image, no kubelet), which is all this cluster can show.
    await wait_for(both_pods_admitted, within=60)

    core = client.CoreV1Api(api_client)
    account = await core.read_namespaced_service_account("nodepool-operator", NAMESPACE)
    assert account.automount_service_account_token is False
    service = await core.read_namespaced_service("nodepool-operator-metrics", NAMESPACE)
    [port] = service.spec.ports
    assert (port.name, port.port, port.target_port) == ("metrics", 8443, "metrics")
    config = _one(installed, "ConfigMap")["metadata"]["name"]
    assert (await core.read_namespaced_config_map(config, NAMESPACE)).data["CLOUD_ENDPOINT"]


async def test_the_installed_crds_are_established(
    installed: list[dict[str, Any]], api_client: client.ApiClient
) -> None:
    extensions = client.ApiextensionsV1Api(api_client)

    async def established() -> bool:
        for obj in installed:
            if obj["kind"] != "CustomResourceDefinition":
                continue
            crd = await extensions.read_custom_resource_definition(obj["metadata"]["name"])
            conditions = crd.status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    await wait_for(established, within=30)


@pytest.mark.parametrize(
    ("verb", "resource", "namespace", "allowed"),
    [
        ("watch", "nodepools.nodepool.dev", None, True),
        ("patch", "nodepools.nodepool.dev/status", None, True),
        ("update", "nodepools.nodepool.dev/status", None, False),  # status is only patched
        ("create", "nodes", None, True),
        ("create", "leases.coordination.k8s.io", NAMESPACE, True),
        ("create", "leases.coordination.k8s.io", "default", False),
        ("get", "secrets", NAMESPACE, False),
    ],
)
async def test_the_service_account_holds_the_operators_permissions_and_no_more(
    installed: list[dict[str, Any]],
    kubectl: Kubectl,
    verb: str,
    resource: str,
    namespace: str | None,
    allowed: bool,
) -> None:
    where = ["--namespace", namespace] if namespace else []
    resource, _, sub = resource.partition("/")
    subresource = [f"--subresource={sub}"] if sub else []
    result = await kubectl(
        "auth", "can-i", verb, resource, *subresource, *where, f"--as={ACCOUNT}", "--quiet"
    )
    assert result.returncode == (0 if allowed else 1), result


async def test_a_second_apply_changes_nothing(
    installed: list[dict[str, Any]], kubectl: Kubectl
) -> None:
    again = await kubectl("apply", "-k", str(DEPLOY))
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert len(lines) == len(installed)
    assert all(line.endswith(" unchanged") for line in lines), again.stdout
