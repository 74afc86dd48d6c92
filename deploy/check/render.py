"""A small kustomize for machines without `kubectl`/`kustomize` (scripts/check-deploy).

Supports what k8s/ uses: resources (files and directories), components (a Component adds
its resources to what the kustomization has so far and applies its own patches to all of
it, before the kustomization's own namespace, labels, images and patches), namespace,
labels (pairs, metadata only), images (newName/newTag/digest) and patches with a target
and an inline JSON 6902 patch. Anything else fails loudly, so the check never passes on a
half render.

Usage: render.py KUSTOMIZATION_DIR > rendered.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

KNOWN = {"apiVersion", "kind", "resources", "components", "namespace", "labels", "images", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def _apply(doc: dict, ops: list[dict]) -> None:
    for op in ops:
        *parents, last = _pointer(op["path"])
        node = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        kind = op["op"]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if kind == "add":
                node.insert(index, op["value"])
            elif kind == "replace":
                node[index] = op["value"]
            elif kind == "remove":
                del node[index]
            else:
                raise SystemExit(f"render.py: unsupported patch op {kind}")
        else:
            if kind in ("add", "replace"):
                if kind == "replace" and last not in node:
                    raise SystemExit(f"render.py: replace of missing {op['path']}")
                node[last] = op["value"]
            elif kind == "remove":
                del node[last]
            else:
                raise SystemExit(f"render.py: unsupported patch op {kind}")


def _images(doc: object, images: list[dict]) -> None:
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for c in value:
                    name, _, _ = str(c.get("image", "")).partition(":")
                    for img in images:
                        if name == img["name"]:
                            new = img.get("newName", name)
                            if "digest" in img:
                                c["image"] = f"{new}@{img['digest']}"
                            else:
                                tag = img.get("newTag", str(c["image"]).partition(":")[2])
                                c["image"] = f"{new}:{tag}" if tag else new
            else:
                _images(value, images)
    elif isinstance(doc, list):
        for item in doc:
            _images(item, images)


def build(directory: Path, accumulated: list[dict] | None = None) -> list[dict]:
    """The documents of the kustomization in `directory`; a Component (kind Component)
    works on `accumulated`, the documents of the kustomization that lists it."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(k) - KNOWN
    if unknown:
        raise SystemExit(f"render.py: {directory}: unsupported fields {sorted(unknown)}; install kustomize")
    component = k.get("kind") == "Component"
    if component != (accumulated is not None):
        raise SystemExit(f"render.py: {directory}: a Component only under `components`, a Kustomization never")
    docs: list[dict] = list(accumulated) if component else []
    for res in k.get("resources", []):
        path = (directory / res).resolve()
        if path.is_dir():
            docs += build(path)
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for comp in k.get("components", []):
        docs = build((directory / comp).resolve(), docs)
    for doc in docs:
        meta = doc.setdefault("metadata", {})
        if "namespace" in k and doc.get("kind") not in CLUSTER_SCOPED:
            meta["namespace"] = k["namespace"]
        for entry in k.get("labels", []):
            if entry.get("includeSelectors") or entry.get("includeTemplates"):
                raise SystemExit("render.py: labels with selectors/templates: install kustomize")
            meta.setdefault("labels", {}).update(entry.get("pairs", {}))
        _images(doc, k.get("images", []))
    for patch in k.get("patches", []):
        target = patch.get("target") or {}
        if "path" in patch or not target:
            raise SystemExit("render.py: only inline JSON 6902 patches with a target; install kustomize")
        ops = yaml.safe_load(patch["patch"])
        hits = [
            d for d in docs
            if d.get("kind") == target.get("kind", d.get("kind"))
            and d["metadata"].get("name") == target.get("name", d["metadata"].get("name"))
        ]
        if not hits:
            raise SystemExit(f"render.py: patch target {target} matches nothing")
        for d in hits:
            _apply(d, ops)
    return docs


if __name__ == "__main__":
    yaml.safe_dump_all(build(Path(sys.argv[1])), sys.stdout, sort_keys=False)
