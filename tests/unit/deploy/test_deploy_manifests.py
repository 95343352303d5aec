"""deploy/ and the Dockerfile, read as files: what the operator's Pod needs is there.

The API server is the judge of validity (tests/integration/deploy send these manifests
to it); these tests check what a server accepts but the operator would not survive:
arguments its command line refuses, probes on the wrong path, a uid the image lacks, a
binding to the wrong subject, CRD files that drifted from the code.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from nodepool_operator import cli
from nodepool_operator.api import crds, wellknown

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"
DEPLOYMENTS = ["manager/deployment.yaml", "simcloud/deployment.yaml"]
CLOUD_TOKEN_SECRET = "nodepool-operator-cloud-token"


def _load(relative: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((DEPLOY / relative).read_text())
    return document


def _pod(relative: str) -> dict[str, Any]:
    pod: dict[str, Any] = _load(relative)["spec"]["template"]["spec"]
    return pod


def _container(relative: str) -> dict[str, Any]:
    [container] = _pod(relative)["containers"]
    return container


def _kustomizations() -> Iterator[Path]:
    yield from sorted(DEPLOY.rglob("kustomization.yaml"))


def _config_literals() -> dict[str, str]:
    kustomization = _load("manager/kustomization.yaml")
    [generator] = kustomization["configMapGenerator"]
    return dict(literal.split("=", 1) for literal in generator["literals"])


def _expanded_args(relative: str) -> list[str]:
    """The container's args as the kubelet expands ``$(VAR)`` from the container's env."""
    deployment = _load(relative)
    container = _container(relative)
    values: dict[str, str] = {}
    for variable in container.get("env", []):
        source = variable.get("valueFrom", {})
        if "value" in variable:
            values[variable["name"]] = variable["value"]
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            values[variable["name"]] = deployment["metadata"]["namespace"]
        elif "configMapKeyRef" in source:
            values[variable["name"]] = _config_literals()[source["configMapKeyRef"]["key"]]

    def expand(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in values, f"$({name}) is not set in the container's env: left unexpanded"
        return values[name]

    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", expand, arg) for arg in container["args"]]


def _parsed_by_the_cli(args: list[str]) -> dict[str, Any]:
    """Parse ``args`` with the real ``nodepool-operator`` command line, without running it."""
    group = typer.main.get_command(cli.app)
    parent = group.make_context("nodepool-operator", list(args))
    command = group.get_command(parent, args[0])
    assert command is not None, f"no subcommand {args[0]!r}"
    params: dict[str, Any] = command.make_context(args[0], args[1:], parent=parent).params
    return params


def _dockerfile_stages() -> list[list[str]]:
    """The Dockerfile's instructions, continuation lines joined, one list per stage."""
    text = (REPO / "Dockerfile").read_text()
    logical = re.sub(r"\\\n", " ", text)
    stages: list[list[str]] = []
    for line in logical.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


# --- CRDs ------------------------------------------------------------------------------


def test_the_crd_file_is_byte_for_byte_what_render_yaml_prints() -> None:
    text = (DEPLOY / "crds" / "crds.yaml").read_text()
    assert text == crds.render_yaml(), "deploy/crds/crds.yaml is stale: scripts/update-crds.sh"


def test_the_crds_base_lists_only_the_generated_file() -> None:
    assert _load("crds/kustomization.yaml")["resources"] == ["crds.yaml"]


# --- kustomize layout ------------------------------------------------------------------


def test_every_manifest_is_used_by_a_kustomization_and_every_reference_exists() -> None:
    referenced: set[Path] = set()
    for kustomization in _kustomizations():
        body = yaml.safe_load(kustomization.read_text())
        patches = [patch["path"] for patch in body.get("patches", []) if "path" in patch]
        for resource in [*body.get("resources", []), *patches]:
            path = (kustomization.parent / resource).resolve()
            assert path.exists(), f"{kustomization}: {resource} does not exist"
            referenced.add(path / "kustomization.yaml" if path.is_dir() else path)
    # The entry points: the install, the optional simulated cloud, and the components
    # (monitoring, AWS) an overlay includes.
    roots = {
        DEPLOY / "kustomization.yaml",
        DEPLOY / "simcloud" / "kustomization.yaml",
        DEPLOY / "monitoring" / "kustomization.yaml",
        DEPLOY / "aws" / "kustomization.yaml",
    }
    manifests = {p.resolve() for p in DEPLOY.rglob("*.yaml")}
    assert manifests - referenced - {r.resolve() for r in roots} == set()


def test_the_install_is_the_namespace_crds_rbac_and_manager() -> None:
    assert _load("kustomization.yaml")["resources"] == ["namespace.yaml", "crds", "rbac", "manager"]
    namespace = _load("namespace.yaml")
    assert namespace["metadata"]["name"] == "nodepool-system"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


# --- the operator's Deployment ---------------------------------------------------------


def test_two_replicas_run_with_leader_election_in_the_leader_election_roles_namespace() -> None:
    deployment = _load("manager/deployment.yaml")
    assert deployment["spec"]["replicas"] == 2
    args = _expanded_args("manager/deployment.yaml")
    assert args[0] == "run"
    params = _parsed_by_the_cli(args)
    assert params["leader_elect"] is True
    role = _load("rbac/leader-election-role.yaml")
    assert params["leader_election_namespace"] == role["metadata"]["namespace"]
    assert role["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert params["metrics_host"] == "0.0.0.0"
    assert params["metrics_port"] == 8443
    assert params["kubeconfig"] is None  # in-cluster config


def test_the_cloud_endpoint_comes_from_the_config_and_defaults_to_the_simcloud_service() -> None:
    params = _parsed_by_the_cli(_expanded_args("manager/deployment.yaml"))
    assert params["cloud_endpoint"] == _config_literals()["CLOUD_ENDPOINT"]
    service = _load("simcloud/service.yaml")
    [port] = service["spec"]["ports"]
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert params["cloud_endpoint"] == f"http://{name}.{namespace}.svc:{port['port']}"


def test_the_simcloud_arguments_are_accepted_and_serve_its_service_port() -> None:
    params = _parsed_by_the_cli(_expanded_args("simcloud/deployment.yaml"))
    assert params["host"] == "0.0.0.0"
    [port] = _container("simcloud/deployment.yaml")["ports"]
    assert params["port"] == port["containerPort"]
    state = Path(params["state"])
    mounts = {m["mountPath"] for m in _container("simcloud/deployment.yaml")["volumeMounts"]}
    assert str(state.parent) in mounts, "the SQLite state needs a writable volume"


def test_an_argument_the_cli_does_not_know_is_refused() -> None:
    with pytest.raises(Exception, match="No such option"):
        _parsed_by_the_cli(["run", "--no-such-flag"])


def test_probes_use_healthz_and_readyz_on_the_plain_health_port_not_the_secure_metrics() -> None:
    container = _container("manager/deployment.yaml")
    params = _parsed_by_the_cli(_expanded_args("manager/deployment.yaml"))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": params["metrics_port"], "health": params["health_port"]}
    assert params["metrics_secure"] is True
    expected = {
        "startupProbe": "/healthz",
        "livenessProbe": "/healthz",
        "readinessProbe": "/readyz",
    }
    for probe, path in expected.items():
        # httpGet without a scheme is plain HTTP: the health port must be the plain one.
        assert container[probe]["httpGet"] == {"path": path, "port": "health"}, probe


def test_a_metrics_reader_clusterrole_lets_a_scraper_get_metrics_and_nothing_else() -> None:
    role = _load("rbac/metrics-reader-role.yaml")
    assert role["metadata"]["name"] == "nodepool-operator-metrics-reader"
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_the_operator_may_ask_the_api_server_who_a_scraper_is_and_what_it_may_do() -> None:
    rules = _load("rbac/clusterrole.yaml")["rules"]
    for group, resource in (
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    ):
        assert {"apiGroups": [group], "resources": [resource], "verbs": ["create"]} in rules


@pytest.mark.parametrize("manifest", DEPLOYMENTS)
def test_pods_meet_the_restricted_pod_security_standard(manifest: str) -> None:
    pod = _pod(manifest)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsUser"] != 0
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context.get("privileged", False) is False
        assert "runAsUser" not in context or context["runAsUser"] != 0
    for namespace in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(namespace), namespace


@pytest.mark.parametrize("manifest", DEPLOYMENTS)
def test_containers_have_requests_and_limits_and_a_writable_tmp(manifest: str) -> None:
    container = _container(manifest)
    for bound in ("requests", "limits"):
        assert set(container["resources"][bound]) == {"cpu", "memory"}, bound
    assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in _pod(manifest)["volumes"]}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        assert "emptyDir" in volume or ("secret" in volume and mount.get("readOnly")), mount


def test_no_manifest_of_deploy_ships_a_secret_an_apply_would_put_back() -> None:
    # The token Secret is the user's: a placeholder in deploy/ would overwrite the real token
    # on every `kubectl apply -k`, and the operator would get 401 from the cloud for good.
    for manifest in sorted(DEPLOY.rglob("*.yaml")):
        for document in yaml.safe_load_all(manifest.read_text()):
            assert (document or {}).get("kind") != "Secret", manifest
            assert "secretGenerator" not in (document or {}), manifest


def test_the_operator_and_the_simcloud_read_the_cloud_token_from_the_same_secret_file() -> None:
    operator = _parsed_by_the_cli(_expanded_args("manager/deployment.yaml"))
    simcloud = _parsed_by_the_cli(_expanded_args("simcloud/deployment.yaml"))
    assert simcloud["insecure_no_auth"] is False
    for manifest, path in (
        ("manager/deployment.yaml", operator["cloud_token_file"]),
        ("simcloud/deployment.yaml", simcloud["token_file"]),
    ):
        volumes = {v["name"]: v for v in _pod(manifest)["volumes"]}
        [mount] = [
            m for m in _container(manifest)["volumeMounts"] if "secret" in volumes[m["name"]]
        ]
        assert volumes[mount["name"]]["secret"]["secretName"] == CLOUD_TOKEN_SECRET
        # Not optional: without the Secret the kubelet refuses to start the Pod and names it.
        assert volumes[mount["name"]]["secret"].get("optional", False) is False
        assert path == Path(mount["mountPath"]) / "token", manifest
    # Neither reads the token from its environment: only the file is the credential.
    for manifest in DEPLOYMENTS:
        for variable in _container(manifest).get("env", []):
            assert "secretKeyRef" not in variable.get("valueFrom", {}), variable


@pytest.mark.parametrize("manifest", DEPLOYMENTS)
def test_pods_run_as_the_image_user(manifest: str) -> None:
    [user] = [i.split()[1] for i in _dockerfile_stages()[-1] if i.upper().startswith("USER ")]
    uid, gid = (int(part) for part in user.split(":"))
    context = _pod(manifest)["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (uid, gid, gid)


def _terms_keeping_off_pool_nodes(pod: dict[str, Any]) -> list[bool]:
    """For each required node selector term of ``pod``: does it refuse a pool's Node?"""
    required = (
        pod.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
    )
    off_pools = {"key": wellknown.POOL_LABEL, "operator": "DoesNotExist"}
    return [off_pools in term["matchExpressions"] for term in required.get("nodeSelectorTerms", [])]


@pytest.mark.parametrize("manifest", DEPLOYMENTS)
def test_the_operator_and_the_simcloud_keep_off_the_nodes_of_every_pool(manifest: str) -> None:
    # A Node of a pool carries POOL_LABEL; the operator drains and deletes those.
    assert _terms_keeping_off_pool_nodes(_pod(manifest)) == [True]


def test_the_charts_default_affinity_keeps_the_operator_off_the_nodes_of_every_pool() -> None:
    values = yaml.safe_load((REPO / "charts" / "nodepool-operator" / "values.yaml").read_text())
    assert _terms_keeping_off_pool_nodes(values) == [True]


def test_only_the_operator_pod_gets_a_service_account_token() -> None:
    account = _load("rbac/service-account.yaml")
    pod = _pod("manager/deployment.yaml")
    assert account["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True  # in-cluster config needs it
    assert _pod("simcloud/deployment.yaml")["automountServiceAccountToken"] is False


def test_the_bindings_give_the_service_account_the_clusterrole_and_the_lease_role() -> None:
    account = _load("rbac/service-account.yaml")
    subject = {
        "kind": "ServiceAccount",
        "name": account["metadata"]["name"],
        "namespace": account["metadata"]["namespace"],
    }
    pairs = [
        ("rbac/clusterrole-binding.yaml", "rbac/clusterrole.yaml"),
        ("rbac/leader-election-role-binding.yaml", "rbac/leader-election-role.yaml"),
    ]
    for binding_file, role_file in pairs:
        binding, role = _load(binding_file), _load(role_file)
        assert binding["subjects"] == [subject], binding_file
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role["kind"],
            "name": role["metadata"]["name"],
        }
        assert binding["metadata"].get("namespace") == role["metadata"].get("namespace")


def test_the_metrics_service_selects_the_operator_pods_on_the_metrics_port() -> None:
    service = _load("manager/service.yaml")
    deployment = _load("manager/deployment.yaml")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8443, "targetPort": "metrics", "protocol": "TCP"}
    ]


# --- the image -------------------------------------------------------------------------


def test_the_image_is_multi_stage_on_a_pinned_slim_python_3_11() -> None:
    text = (REPO / "Dockerfile").read_text()
    [base] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, flags=re.MULTILINE)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base), base
    stages = _dockerfile_stages()
    assert [stage[0] for stage in stages] == [
        "FROM ${PYTHON_IMAGE} AS build",
        "FROM ${PYTHON_IMAGE} AS runtime",
    ]


def test_the_final_stage_installs_the_built_wheel_without_build_tools_or_caches() -> None:
    build, runtime = _dockerfile_stages()
    assert any("pip wheel" in i for i in build)
    runs = " ".join(i for i in runtime if i.startswith("RUN "))
    for needed in ("from=build", "--no-index", "venv"):
        assert needed in runs, needed
    for tool in ("apt-get", "apk ", "gcc", "build-essential", "make "):
        assert tool not in runs, tool
    for stage in (build, runtime):
        for instruction in stage:
            if "pip wheel" in instruction or "pip install" in instruction:
                assert "--no-cache-dir" in instruction, instruction
        assert "ARG SOURCE_DATE_EPOCH=315532800" in stage
        assert any("PYTHONDONTWRITEBYTECODE=1" in i for i in stage if i.startswith("ENV "))


def test_the_image_runs_the_operator_as_a_fixed_non_root_user() -> None:
    runtime = _dockerfile_stages()[-1]
    [user] = [i.split()[1] for i in runtime if i.startswith("USER ")]
    assert re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", user), "numeric, so runAsNonRoot can check"
    assert 'ENTRYPOINT ["nodepool-operator"]' in runtime
    assert 'CMD ["run"]' in runtime
    assert "EXPOSE 8443 8081" in runtime


def test_the_build_context_holds_what_the_wheel_is_built_from() -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "an allowlist: everything is left out unless named"
    allowed = [pattern[1:].rstrip("/") for pattern in patterns if pattern.startswith("!")]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # The wheel is src/nodepool_operator alone (pyproject.toml); nothing outside src/ is
    # bundled, since only the development tools read tools/ and deploy/rbac; the lock pins
    # what is installed.
    assert set(allowed) == {
        "pyproject.toml",
        project["readme"],
        "requirements/runtime.txt",
        "src",
    }
    copied = " ".join(i for i in _dockerfile_stages()[0] if i.startswith("COPY "))
    for name in allowed:
        assert name in copied, name
