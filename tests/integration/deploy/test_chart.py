"""charts/nodepool-operator as a Helm user meets it, with the pinned helm of tools/helm.

Rendering (`helm lint`, `helm template`) needs no cluster: the chart renders the same RBAC
and the same operator Pod as deploy/ (kustomize), and every value does what values.yaml
says, the schema refusing what it must. On the local control plane: `helm install
--dry-run=server`, the rendered objects through a server-side dry run with strict field
validation, then a real `helm install`, `helm upgrade` and `helm uninstall`.

The real install uses its own release name and namespace: tests/e2e and test_deploy_apply
create deploy/'s objects (same names as the chart's defaults) in the same control plane.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from nodepool_devtools.cluster import binaries
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator import cli
from nodepool_operator.api import wellknown

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "nodepool-operator"
DEPLOY = REPO / "deploy"
MONITORING = DEPLOY / "monitoring"
RELEASE = "nodepool-operator"  # the default install: deploy/'s names
NAMESPACE = "nodepool-system"
TOKEN = "a-cloud-token-for-tests"
CRD_NAMES = ("nodepools.nodepool.dev", "scalerequests.nodepool.dev", "autoscalers.nodepool.dev")
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount")


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


def run(*command: str | Path, stdin: str | None = None) -> Run:
    done = subprocess.run(
        [str(part) for part in command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def helm() -> Path:
    return binaries.ensure_helm()


@pytest.fixture(scope="module")
def kubectl() -> Path:
    return binaries.ensure_binaries()["kubectl"]


def template(helm: Path, *values: str, release: str = RELEASE) -> list[dict[str, Any]]:
    """`helm template` with ``values`` (``key=value`` for --set), parsed; fails on error."""
    sets = [arg for value in values for arg in ("--set", value)]
    rendered = run(
        helm, "template", release, CHART, "--namespace", NAMESPACE,
        "--set", f"cloud.credentials.token={TOKEN}", *sets,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def refused(helm: Path, *values: str) -> str:
    sets = [arg for value in values for arg in ("--set", value)]
    rendered = run(helm, "template", RELEASE, CHART, *sets)
    assert rendered.returncode != 0, rendered.stdout
    return rendered.stderr


def kustomized(kubectl: Path) -> list[dict[str, Any]]:
    rendered = run(kubectl, "kustomize", DEPLOY)
    assert rendered.returncode == 0, rendered.stderr
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def only(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    return found


def kinds(objects: list[dict[str, Any]]) -> set[str]:
    return {o["kind"] for o in objects}


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = only(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [found] = pod_spec(objects)["containers"]
    return found


def parsed_run_args(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The container's args as the real `nodepool-operator run` parses them (not run)."""
    args = container(objects)["args"]
    assert args[0] == "run"
    group = typer.main.get_command(cli.app)
    context = group.make_context("nodepool-operator", list(args))
    command = group.get_command(context, "run")
    assert command is not None
    params: dict[str, Any] = command.make_context("run", args[1:], parent=context).params
    return params


def _without_labels(obj: dict[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(obj))
    copy["metadata"].pop("labels", None)
    copy["metadata"].pop("annotations", None)
    return copy


# --- rendering ---------------------------------------------------------------------------


def test_helm_is_the_pinned_version_built_from_tools(helm: Path) -> None:
    version = run(helm, "version", "--template", "{{ .Version }}")
    assert version.returncode == 0, version.stderr
    assert version.stdout == binaries.HELM.version(binaries.tools_directory())


def test_the_chart_lints_clean(helm: Path) -> None:
    linted = run(helm, "lint", "--strict", CHART, "--set", f"cloud.credentials.token={TOKEN}")
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_the_chart_renders_the_same_rbac_as_deploy(helm: Path, kubectl: Path) -> None:
    chart = {(o["kind"], o["metadata"]["name"]): o for o in template(helm)}
    deploy = {(o["kind"], o["metadata"]["name"]): o for o in kustomized(kubectl)}
    rbac = sorted(key for key in deploy if key[0] in RBAC_KINDS)
    assert sorted(key for key in chart if key[0] in RBAC_KINDS) == rbac
    for key in rbac:
        assert _without_labels(chart[key]) == _without_labels(deploy[key]), key


def test_the_chart_renders_the_same_operator_pod_as_deploy(helm: Path, kubectl: Path) -> None:
    chart, deploy = template(helm), kustomized(kubectl)
    # What legitimately differs: the ConfigMap's name (kustomize hashes it; the chart rolls
    # the Pods with a checksum annotation instead) and the selector labels (the chart's
    # include the release, so two releases never select each other's Pods).
    config = {
        "chart": only(chart, "ConfigMap")["metadata"]["name"],
        "deploy": only(deploy, "ConfigMap")["metadata"]["name"],
    }
    assert only(chart, "ConfigMap")["data"] == only(deploy, "ConfigMap")["data"]
    chart_pod = json.dumps(pod_spec(chart)).replace(config["chart"], "CONFIG")
    deploy_pod = json.dumps(pod_spec(deploy)).replace(config["deploy"], "CONFIG")
    chart_spec, deploy_spec = json.loads(chart_pod), json.loads(deploy_pod)
    for spec, objects in ((chart_spec, chart), (deploy_spec, deploy)):
        selector = only(objects, "Deployment")["spec"]["selector"]
        for constraint in spec["topologySpreadConstraints"]:
            assert constraint.pop("labelSelector") == selector
    assert chart_spec == deploy_spec
    assert only(chart, "Deployment")["spec"]["replicas"] == 2
    annotations = only(chart, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert set(annotations) == {"kubectl.kubernetes.io/default-container", "checksum/config"}


def test_the_crds_are_in_the_charts_crds_directory_not_templates(helm: Path) -> None:
    assert "CustomResourceDefinition" not in kinds(template(helm))
    shown = run(helm, "show", "crds", CHART)
    assert shown.returncode == 0, shown.stderr
    names = {d["metadata"]["name"] for d in yaml.safe_load_all(shown.stdout) if d}
    assert names == set(CRD_NAMES)


def test_the_default_install_has_a_pdb_a_metrics_service_and_no_monitoring(helm: Path) -> None:
    objects = template(helm)
    assert kinds(objects) == {*RBAC_KINDS, "ConfigMap", "Secret", "Service", "Deployment",
                              "PodDisruptionBudget"}  # fmt: skip
    budget = only(objects, "PodDisruptionBudget")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"] == only(objects, "Deployment")["spec"]["selector"]
    service = only(objects, "Service")["spec"]
    assert service["selector"] == only(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    assert service["ports"] == [
        {"name": "metrics", "port": 8443, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_the_image_replicas_resources_and_log_level_are_values(helm: Path) -> None:
    objects = template(
        helm,
        "image.repository=registry.example.com/platform/nodepool-operator",
        "image.tag=0.2.0",
        "replicas=3",
        "resources.limits.memory=1Gi",
        "logLevel=DEBUG",
        "logFormat=json",
        "extraArgs={--no-simulated-nodes}",
    )
    assert container(objects)["image"] == "registry.example.com/platform/nodepool-operator:0.2.0"
    assert only(objects, "Deployment")["spec"]["replicas"] == 3
    assert container(objects)["resources"]["limits"]["memory"] == "1Gi"
    params = parsed_run_args(objects)
    assert params["log_level"] == "DEBUG"
    assert params["log_format"] == "json"
    assert params["simulated_nodes"] is False
    digest = "sha256:" + "0" * 64
    pinned = template(helm, "image.repository=r.example/op", f"image.digest={digest}")
    assert container(pinned)["image"] == f"r.example/op@{digest}"


def test_the_cloud_endpoint_is_a_value_and_a_change_rolls_the_pods(helm: Path) -> None:
    before = template(helm)
    after = template(helm, "cloud.endpoint=https://cloud-api.example.internal:8787")
    assert only(after, "ConfigMap")["data"] == {
        "CLOUD_ENDPOINT": "https://cloud-api.example.internal:8787"
    }
    checksum = "checksum/config"
    annotations = [
        only(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"][checksum]
        for objects in (before, after)
    ]
    assert annotations[0] != annotations[1]


def test_the_token_secret_is_created_or_an_existing_one_is_mounted(helm: Path) -> None:
    created = template(helm)
    secret = only(created, "Secret")
    assert secret["data"] == {"token": "YS1jbG91ZC10b2tlbi1mb3ItdGVzdHM="}  # base64 of TOKEN
    [volume] = [v for v in pod_spec(created)["volumes"] if v["name"] == "cloud-token"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    assert parsed_run_args(created)["cloud_token_file"] == Path(
        "/var/run/secrets/nodepool.dev/cloud/token"
    )

    existing = template(
        helm,
        "cloud.credentials.token=",
        "cloud.credentials.existingSecret=my-cloud-token",
        "cloud.credentials.secretKey=api-key",
    )
    assert "Secret" not in kinds(existing)
    [volume] = [v for v in pod_spec(existing)["volumes"] if v["name"] == "cloud-token"]
    assert volume["secret"]["secretName"] == "my-cloud-token"
    assert volume["secret"]["items"] == [{"key": "api-key", "path": "token"}]
    for variable in container(existing)["env"]:
        assert "secretKeyRef" not in variable.get("valueFrom", {})  # a file, never the env


def test_a_provider_with_its_own_credentials_needs_no_token_or_endpoint(helm: Path) -> None:
    objects = template(
        helm,
        "cloud.provider=aws",
        "cloud.clusterName=prod-1",
        "cloud.endpoint=",
        "cloud.credentials.token=",
        "extraEnv[0].name=AWS_REGION",
        "extraEnv[0].value=eu-west-1",
        "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/np",
    )
    params = parsed_run_args(objects)
    assert params["cloud"] == "aws"
    assert params["cluster_name"] == "prod-1"
    assert params["cloud_token_file"] is None
    assert "Secret" not in kinds(objects)
    assert "cloud-token" not in {v["name"] for v in pod_spec(objects)["volumes"]}
    assert {"name": "AWS_REGION", "value": "eu-west-1"} in container(objects)["env"]
    assert "CLOUD_ENDPOINT" not in {e["name"] for e in container(objects)["env"]}
    account = only(objects, "ServiceAccount")["metadata"]["annotations"]
    assert account == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/np"}


def test_the_rendered_operator_and_simcloud_keep_off_the_nodes_of_every_pool(
    helm: Path, kubectl: Path
) -> None:
    simcloud = run(kubectl, "kustomize", DEPLOY / "simcloud")
    assert simcloud.returncode == 0, simcloud.stderr
    off_pools = {"key": wellknown.POOL_LABEL, "operator": "DoesNotExist"}
    for objects in (template(helm), kustomized(kubectl), list(yaml.safe_load_all(simcloud.stdout))):
        affinity = pod_spec([o for o in objects if o])["affinity"]["nodeAffinity"]
        terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert [off_pools in term["matchExpressions"] for term in terms] == [True]


def test_scheduling_values_reach_the_pod(helm: Path) -> None:
    objects = template(
        helm,
        "nodeSelector.node-role\\.kubernetes\\.io/control-plane=",
        "tolerations[0].key=node-role.kubernetes.io/control-plane",
        "tolerations[0].operator=Exists",
        "tolerations[0].effect=NoSchedule",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].key=kubernetes.io/arch",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator=In",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].values={amd64}",
        "priorityClassName=system-cluster-critical",
    )
    spec = pod_spec(objects)
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert spec["tolerations"] == [
        {
            "key": "node-role.kubernetes.io/control-plane",
            "operator": "Exists",
            "effect": "NoSchedule",
        }
    ]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["amd64"]
    assert spec["priorityClassName"] == "system-cluster-critical"


def test_one_replica_may_run_without_leader_election_and_then_needs_no_lease_role(
    helm: Path,
) -> None:
    objects = template(helm, "replicas=1", "leaderElection.enabled=false")
    assert parsed_run_args(objects)["leader_elect"] is False
    assert "Role" not in kinds(objects)
    assert "RoleBinding" not in kinds(objects)


def test_metrics_values_switch_the_service_the_scheme_and_the_certificate(helm: Path) -> None:
    off = template(helm, "metrics.enabled=false", "podDisruptionBudget.enabled=false")
    assert "Service" not in kinds(off)
    assert "PodDisruptionBudget" not in kinds(off)
    assert [o["metadata"]["name"] for o in off if o["kind"] == "ClusterRole"] == [RELEASE]

    plain = template(helm, "metrics.secure=false", "metrics.port=9090")
    params = parsed_run_args(plain)
    assert (params["metrics_secure"], params["metrics_port"]) == (False, 9090)
    assert only(plain, "Service")["spec"]["ports"][0]["port"] == 9090

    certified = template(helm, "metrics.certSecret=operator-metrics-tls")
    params = parsed_run_args(certified)
    [mount] = [m for m in container(certified)["volumeMounts"] if m["name"] == "metrics-tls"]
    assert params["metrics_cert_dir"] == Path(mount["mountPath"])
    [volume] = [v for v in pod_spec(certified)["volumes"] if v["name"] == "metrics-tls"]
    assert volume["secret"]["secretName"] == "operator-metrics-tls"


def test_the_service_monitor_scrapes_the_metrics_service_over_https(helm: Path) -> None:
    objects = template(
        helm,
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=kube-prometheus-stack",
    )
    monitor = only(objects, "ServiceMonitor")
    service = only(objects, "Service")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    verified = template(
        helm,
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.insecureSkipVerify=false",
        "metrics.serviceMonitor.ca.secret.name=metrics-ca",
        "metrics.serviceMonitor.ca.secret.key=ca.crt",
    )
    [endpoint] = only(verified, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["tlsConfig"] == {
        "serverName": f"{RELEASE}-metrics.{NAMESPACE}.svc",
        "ca": {"secret": {"name": "metrics-ca", "key": "ca.crt"}},
    }


def test_the_alert_rules_and_dashboard_are_deploy_monitorings(helm: Path) -> None:
    objects = template(
        helm, "metrics.prometheusRule.enabled=true", "metrics.grafanaDashboard.enabled=true"
    )
    source = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert only(objects, "PrometheusRule")["spec"] == source["spec"]
    dashboard = only(objects, "ConfigMap", f"{RELEASE}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["nodepool-operator.json"]) == json.loads(
        (MONITORING / "dashboards" / "nodepool-operator.json").read_text()
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param([], "set cloud.credentials.existingSecret", id="no-credentials"),
        pytest.param(
            ["cloud.credentials.token=x", "replicas=0"], "minimum: got 0, want 1", id="replicas"
        ),
        pytest.param(
            ["cloud.credentials.token=x", "logLevel=verbose"], "/logLevel", id="log-level"
        ),
        pytest.param(
            ["cloud.credentials.token=x", "replica=2"],
            "additional properties 'replica' not allowed",
            id="misspelt-key",
        ),
        pytest.param(
            ["cloud.credentials.token=x", "cloud.endpoint=cloud-api:8787"],
            "/cloud/endpoint",
            id="endpoint-without-scheme",
        ),
        pytest.param(
            ["cloud.provider=aws", "cloud.endpoint="],
            "cloud.clusterName is required with cloud.provider aws",
            id="aws-without-cluster-name",
        ),
        pytest.param(
            ["cloud.credentials.token=x", "cloud.clusterName=-bad"],
            "/cloud/clusterName",
            id="cluster-name-syntax",
        ),
        pytest.param(
            ["cloud.credentials.token=x", "leaderElection.enabled=false"],
            "replicas > 1 needs leaderElection.enabled",
            id="two-leaders",
        ),
    ],
)
def test_the_chart_refuses_wrong_values(helm: Path, values: list[str], message: str) -> None:
    assert message in refused(helm, *values)


# --- on the local control plane ----------------------------------------------------------


@dataclass(frozen=True)
class Target:
    kubeconfig: Path
    namespace: str
    release: str


@pytest.fixture(scope="module")
def target(cluster: Cluster, kubectl: Path, helm: Path) -> Iterator[Target]:
    """A namespace enforcing "restricted" Pod Security, removed with the release after."""
    suffix = uuid.uuid4().hex[:6]
    found = Target(cluster.kubeconfig, f"chart-{suffix}", f"np-{suffix}")
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": found.namespace,
            "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
        },
    }
    created = run(
        kubectl, "--kubeconfig", found.kubeconfig, "apply", "-f", "-", stdin=json.dumps(namespace)
    )
    assert created.returncode == 0, created.stderr
    try:
        yield found
    finally:
        run(helm, "uninstall", found.release, "--namespace", found.namespace,
            "--kubeconfig", found.kubeconfig, "--wait", "--timeout", "90s")  # fmt: skip
        run(kubectl, "--kubeconfig", found.kubeconfig, "delete", "namespace", found.namespace,
            "--wait=false")  # fmt: skip


def helm_on(helm: Path, target: Target, *args: str) -> Run:
    return run(helm, *args, "--namespace", target.namespace, "--kubeconfig", target.kubeconfig)


def get(kubectl: Path, target: Target, *args: str) -> dict[str, Any]:
    got = run(kubectl, "--kubeconfig", target.kubeconfig, "-n", target.namespace, "get", *args,
              "-o", "json")  # fmt: skip
    assert got.returncode == 0, got.stderr
    loaded: dict[str, Any] = json.loads(got.stdout)
    return loaded


def test_a_server_dry_run_accepts_every_rendered_object(
    helm: Path, kubectl: Path, target: Target
) -> None:
    dry = helm_on(
        helm, target, "install", target.release, str(CHART), "--dry-run=server",
        "--set", f"cloud.credentials.token={TOKEN}",
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "STATUS: pending-install" in dry.stdout
    # helm's dry run asks the server only for lookups; the API server's own judgement
    # (schemas, strict field validation, Pod Security admission) comes from kubectl.
    rendered = helm_on(
        helm, target, "template", target.release, str(CHART),
        "--set", f"cloud.credentials.token={TOKEN}",
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    applied = run(
        kubectl, "--kubeconfig", target.kubeconfig, "-n", target.namespace, "apply",
        "--dry-run=server", "--validate=strict", "-f", "-", stdin=rendered.stdout,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    assert "PodSecurity" not in applied.stderr, applied.stderr
    objects = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    assert len(applied.stdout.splitlines()) == len(objects), applied.stdout


def test_helm_install_upgrade_and_uninstall_on_the_local_control_plane(
    helm: Path, kubectl: Path, target: Target
) -> None:
    installed = helm_on(
        helm, target, "install", target.release, str(CHART),
        "--set", f"cloud.credentials.token={TOKEN}", "--wait=false",
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    fullname = f"{target.release}-nodepool-operator"
    deployment = get(kubectl, target, "deployment", fullname)
    assert deployment["spec"]["replicas"] == 2
    for name in (
        "nodepools.nodepool.dev",
        "scalerequests.nodepool.dev",
        "autoscalers.nodepool.dev",
    ):
        crd = run(kubectl, "--kubeconfig", target.kubeconfig, "get", "crd", name)
        assert crd.returncode == 0, crd.stderr
    # The ReplicaSet controller creates both Pods in a namespace enforcing "restricted"
    # (no image or kubelet here: they stay Pending, which is all this cluster can show).
    wait = run(
        kubectl, "--kubeconfig", target.kubeconfig, "-n", target.namespace, "wait",
        f"deployment/{fullname}", "--for=jsonpath={.status.replicas}=2", "--timeout=90s",
    )  # fmt: skip
    assert wait.returncode == 0, wait.stderr
    roles = get(kubectl, target, "role", f"{fullname}-leader-election")
    assert (
        roles["rules"]
        == yaml.safe_load((DEPLOY / "rbac" / "leader-election-role.yaml").read_text())["rules"]
    )

    template_hash = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    upgraded = helm_on(
        helm, target, "upgrade", target.release, str(CHART), "--reuse-values",
        "--set", "cloud.endpoint=https://cloud-api.example.internal:8787", "--wait=false",
    )  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr
    config = get(kubectl, target, "configmap", f"{fullname}-config")
    assert config["data"]["CLOUD_ENDPOINT"] == "https://cloud-api.example.internal:8787"
    rolled = get(kubectl, target, "deployment", fullname)
    assert rolled["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != template_hash
    assert rolled["metadata"]["generation"] > deployment["metadata"]["generation"]
    history = helm_on(helm, target, "history", target.release, "--output", "json")
    assert [r["status"] for r in json.loads(history.stdout)] == ["superseded", "deployed"]

    removed = helm_on(helm, target, "uninstall", target.release, "--wait", "--timeout", "90s")
    assert removed.returncode == 0, removed.stderr
    left = run(kubectl, "--kubeconfig", target.kubeconfig, "get", "clusterrole", fullname)
    assert left.returncode != 0
    assert "NotFound" in left.stderr
    # helm never deletes the CRDs of crds/ (nor the NodePools they hold).
    kept = run(kubectl, "--kubeconfig", target.kubeconfig, "get", "crd", "nodepools.nodepool.dev")
    assert kept.returncode == 0, kept.stderr
