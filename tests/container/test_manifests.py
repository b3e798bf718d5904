"""deploy/kubernetes as `kubectl apply -k` would apply it: rendered by `kubectl kustomize`,
valid against Kubernetes' schemas (`kubernetes-validate --strict`), and consistent with the
pool.toml it ships: the grace period above drain_timeout + stop_grace, the probes on the
metrics port's /healthz and /readyz, the store from the Secret, memory for `capacity` jobs,
a pod that needs no privilege, and a KEDA ScaledObject on poolsup_jobs{state="pending"}.

No Kubernetes runs here (no kubelet, kind or k3s, and no image registry): the image itself
is tested with podman (test_image.py). Outside CI these tests skip where kubectl or
kubernetes-validate is missing; in CI they fail.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from supervisor.config import load_config
from supervisor.sizes import parse_size
from tests.container.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    result = subprocess.run([_tool("kubectl"), "kustomize", str(MANIFESTS)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    path = tmp_path_factory.mktemp("manifests") / "rendered.yaml"
    path.write_text(result.stdout)
    return path


def resources(rendered: Path) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(rendered.read_text()) if doc}


def test_the_rendered_manifests_are_valid_kubernetes(rendered: Path) -> None:
    result = subprocess.run([_tool("kubernetes-validate"), "--strict", str(rendered)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "failed" not in result.stdout.lower(), result.stdout
    assert set(resources(rendered)) == {"ConfigMap", "Secret", "Deployment",
                                        "PodDisruptionBudget"}


def test_the_deployment_fits_its_pool_toml_and_needs_no_privilege(
    rendered: Path, tmp_path: Path,
) -> None:
    kinds = resources(rendered)
    config_map, secret, deployment = kinds["ConfigMap"], kinds["Secret"], kinds["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]

    # The ConfigMap as the pod mounts it, read by poolsup's own loader with the Secret's
    # POOLSUP_STORE.
    for name, text in config_map["data"].items():
        (tmp_path / name).write_text(text)
    store = base64.b64decode(secret["data"]["POOLSUP_STORE"]).decode()
    config = load_config(tmp_path / "pool.toml", environ={"POOLSUP_STORE": store},
                         require_handlers=True)
    assert config.pool.store == store
    assert [source["secretRef"]["name"] for source in container["envFrom"]] == [
        secret["metadata"]["name"]]
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    assert mounts["config"]["mountPath"] == "/etc/poolsup" and mounts["config"]["readOnly"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert "emptyDir" in volumes[next(n for n, m in mounts.items() if m["mountPath"] == "/tmp")]

    supervisor = config.supervisor
    assert pod["terminationGracePeriodSeconds"] > supervisor.drain_timeout + supervisor.stop_grace

    assert config.metrics is not None and config.metrics.host == "0.0.0.0"
    (port,) = [p for p in container["ports"] if p["containerPort"] == config.metrics.port]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}

    limits = [handler.memory_limit for handler in config.handlers.values()]
    assert all(limits), "every handler of the example has a memory_limit to size the pod by"
    needed = supervisor.capacity * max(limit or 0 for limit in limits)
    memory = parse_size(re.sub(r"i$", "iB", container["resources"]["limits"]["memory"]),
                        where="deployment.yaml")
    assert memory > needed, (memory, needed)
    assert container["resources"]["requests"]["memory"] == (
        container["resources"]["limits"]["memory"])

    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001

    budget = kinds["PodDisruptionBudget"]["spec"]
    assert budget["selector"] == deployment["spec"]["selector"]


def test_the_keda_example_scales_the_deployment_on_pending_jobs_per_handler() -> None:
    scaled = yaml.safe_load((MANIFESTS / "keda-scaledobject.yaml").read_text())
    deployment = yaml.safe_load((MANIFESTS / "deployment.yaml").read_text())
    pool = tomllib.loads((MANIFESTS / "pool.toml").read_text())
    assert (scaled["apiVersion"], scaled["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    handlers = re.findall(r'poolsup_jobs\{state="pending",handler="([^"]+)"\}',
                          trigger["metadata"]["query"])
    assert handlers and set(handlers) <= set(pool["handlers"])
    assert int(trigger["metadata"]["threshold"]) == pool["supervisor"]["capacity"]
