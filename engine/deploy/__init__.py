"""Deployment manifests from a profile: a Kubernetes LeaderWorkerSet for a `nodes` layout.

lws_manifest(profile, K8sOptions(image=...)) -> [LeaderWorkerSet, Service]
"""

from engine.deploy.lws import K8sOptions, default_image, lws_manifest, npu_resource

__all__ = ["K8sOptions", "default_image", "lws_manifest", "npu_resource"]
