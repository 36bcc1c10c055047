"""Deployment files for a model repository, pinned to the serving image (pin.serve) by
digest: a Compose file (one service per GPU kind, each a Compose profile, since a host has
one kind) and Kubernetes manifests (a Deployment per GPU kind of the fleet, on nodes whose
`nvidia.com/gpu.product` label names it, and one Service). Triton reads the repository
mounted read-only, is ready when `/v2/health/ready` answers (every model loaded), and takes
`--model-config-name=<kind>` where the package wrote a config of that kind's own (two kinds
of one compute capability: serve/repository.py).

Written as data, then YAML: the tests check them against the published schemas (Compose
spec, Kubernetes), offline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core import console, fileio, ngc, plain_yaml

if TYPE_CHECKING:
    from pipeline.core.config_pin import PinConfig

MOUNT = "/models"
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
READY, LIVE = "/v2/health/ready", "/v2/health/live"
CLAIM = "triton-model-repository"  # the PersistentVolumeClaim the repository is synced to
PRODUCT_LABEL = "nvidia.com/gpu.product"


def write(out: Path, repository: Path, pin: PinConfig) -> list[Path]:
    """deploy/compose.yaml and deploy/kubernetes/*.yaml beside `repository`; the files
    written. Nothing where no serving image is pinned (said in a line)."""
    serve = ngc.pinned(pin, "serve")
    if serve is None:
        console.note("deploy: no serving image pinned (pin.serve): no deployment files written")
        return []
    if not serve.digest:
        console.warn(f"deploy: {serve} is pinned by tag only: give pin.serve.digest")
    kinds = {str(k): str(v.product) for k, v in pin.fleet.items()}
    own = _kinds_with_configs(repository)
    rel = (Path("..") / repository.name).as_posix()
    files: dict[str, list[dict[str, Any]]] = {
        "compose.yaml": [compose(str(serve), kinds, own, rel)]
    }
    for name, docs in kubernetes(str(serve), kinds, own).items():
        files[f"kubernetes/{name}.yaml"] = docs
    with fileio.staged_dir(out) as tmp:
        for name, docs in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            fileio.write_text(tmp / name, plain_yaml.dump(*docs))
    return [out / name for name in files]


def _kinds_with_configs(repository: Path) -> set[str]:
    """GPU kinds some model has a config of its own for (configs/<kind>.pbtxt)."""
    return {p.stem for p in repository.glob("*/configs/*.pbtxt")}


def _args(kind: str | None, own: set[str]) -> list[str]:
    args = ["tritonserver", f"--model-repository={MOUNT}"]
    if kind and kind in own:
        args.append(f"--model-config-name={kind}")
    return args


# Open shape: a Docker Compose document (compose-spec), checked against its schema in tests.
def compose(image: str, kinds: dict[str, str], own: set[str], repository: str) -> dict[str, Any]:
    """One service per GPU kind, each its own profile (`docker compose --profile <kind> up`),
    or one service where no fleet is named."""
    services: dict[str, Any] = {}
    names: list[str | None] = list(kinds) or [None]
    for kind in names:
        service: dict[str, Any] = {
            "image": image,
            "command": _args(kind, own),
            "ports": [f"{p}:{p}" for p in PORTS.values()],
            "volumes": [f"{repository}:{MOUNT}:ro"],
            "healthcheck": {
                "test": ["CMD", "curl", "-fsS", f"http://localhost:{PORTS['http']}{READY}"],
                "interval": "10s",
                "timeout": "5s",
                "retries": 30,
            },
            "deploy": {
                "resources": {
                    "reservations": {
                        "devices": [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
                    }
                }
            },
        }
        if kind:
            service["profiles"] = [kind]
        services[f"triton-{kind}" if kind else "triton"] = service
    return {"name": "triton", "services": services}


def kubernetes(image: str, kinds: dict[str, str], own: set[str]) -> dict[str, list[dict[str, Any]]]:
    """File name -> its manifests: a Deployment per GPU kind, and the Service over them."""
    pairs: list[tuple[str | None, str]] = list(kinds.items()) or [(None, "")]
    out = {(kind or "triton"): [_deployment(image, kind, product, own)] for kind, product in pairs}
    out["service"] = [_service()]
    return out


# Open shape: a Kubernetes Deployment manifest, checked by kubernetes-validate in tests.
def _deployment(image: str, kind: str | None, product: str, own: set[str]) -> dict[str, Any]:
    labels = {"app": "triton", **({"gpu-kind": kind} if kind else {})}
    container: dict[str, Any] = {
        "name": "tritonserver",
        "image": image,
        "args": _args(kind, own),
        "ports": [{"name": n, "containerPort": p} for n, p in PORTS.items()],
        "readinessProbe": {"httpGet": {"path": READY, "port": "http"}, "periodSeconds": 5},
        "livenessProbe": {
            "httpGet": {"path": LIVE, "port": "http"},
            "initialDelaySeconds": 30,
            "periodSeconds": 10,
        },
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        "volumeMounts": [{"name": "models", "mountPath": MOUNT, "readOnly": True}],
    }
    spec: dict[str, Any] = {
        "containers": [container],
        "volumes": [
            {"name": "models", "persistentVolumeClaim": {"claimName": CLAIM, "readOnly": True}}
        ],
    }
    if product:
        spec["nodeSelector"] = {PRODUCT_LABEL: product}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"triton-{kind}" if kind else "triton", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


# Open shape: a Kubernetes Service manifest, checked by kubernetes-validate in tests.
def _service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "triton", "labels": {"app": "triton"}},
        "spec": {
            "selector": {"app": "triton"},
            "ports": [{"name": n, "port": p, "targetPort": n} for n, p in PORTS.items()],
        },
    }
