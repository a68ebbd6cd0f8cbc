"""Render KubeSpawner's pod manifest for a fake student from values.yaml (offline; JSON on stdout).

Maps the ``singleuser`` section of the Helm values onto KubeSpawner's traits the way the Zero to
JupyterHub chart does, then calls ``get_pod_manifest``: tests/test_hub.py checks the result.
"""

import asyncio
import json
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

# KubeSpawner loads a client config when built (the path is read at import): an offline one
# that points nowhere is enough to render a manifest.
FAKE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""
_kubeconfig = tempfile.NamedTemporaryFile("w", suffix=".yaml")  # noqa: SIM115 (lives until exit)
_kubeconfig.write(FAKE_KUBECONFIG)
_kubeconfig.flush()
os.environ["KUBECONFIG"] = _kubeconfig.name

import yaml  # noqa: E402
from kubernetes_asyncio.client import ApiClient  # noqa: E402
from kubespawner import KubeSpawner  # noqa: E402

VALUES = yaml.safe_load((Path(__file__).with_name("values.yaml")).read_text())


async def main() -> None:
    """Print the pod manifest of student ``alice`` as JSON."""
    su = VALUES["singleuser"]
    user = SimpleNamespace(name="alice", id=1, url="/user/alice/")
    spawner = KubeSpawner(
        _mock=True, user=user, image=f"{su['image']['name']}:{su['image']['tag']}", uid=su["uid"],
        fs_gid=su["fsGid"], cpu_limit=float(su["cpu"]["limit"]),
        cpu_guarantee=float(su["cpu"]["guarantee"]), mem_limit=su["memory"]["limit"],
        mem_guarantee=su["memory"]["guarantee"], environment=su["extraEnv"],
        container_security_context=su["containerSecurityContext"],
        lifecycle_hooks=su["lifecycleHooks"], default_url=su["defaultUrl"],
        profile_list=su["profileList"])
    pod = await spawner.get_pod_manifest()
    print(json.dumps(ApiClient().sanitize_for_serialization(pod), indent=1))


asyncio.run(main())
