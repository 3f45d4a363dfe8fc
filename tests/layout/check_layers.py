#!/usr/bin/env python3
"""Fails (exit 1, one line per violation) when a file includes against Sluice's layering.

Usage: check_layers.py SOURCE_DIR

The rules (core/CMakeLists.txt and each folder's README.md say the same):
  - core/ holds only layer folders; no source file sits directly in core/.
  - A core layer includes only itself and the layers before it in LAYERS (a file in
    core/data/ops/ is in layer `data`). The public headers in include/sluice/ count as the layer
    that implements them (PUBLIC_LAYER); the client's public headers are above all of core.
  - Only core/rpc/ includes grpcpp or generated gRPC stubs (*.grpc.pb.h).
  - include/sluice/ headers include only include/sluice/ headers, the standard library and Abseil.
"""
import os
import re
import sys

LAYERS = ["util", "tensor", "device", "format", "io", "obs", "data", "rpc"]
# include/sluice/<name> -> the core layer that implements it; absent: client (above core).
PUBLIC_LAYER = {
    "dtype.h": "tensor", "shape.h": "tensor", "tensor.h": "tensor", "nest.h": "tensor",
    "element.h": "tensor", "composite_tensor.h": "tensor", "per_replica.h": "tensor", "per_replica_format.h": "format",
    "dataset.h": "data", "plugin_api.h": "data", "auto_shard_policy.h": "data",
    "snapshot.h": "data",
}
CLIENT = len(LAYERS)
C_STD = {"stddef.h", "stdint.h", "stdbool.h", "stdlib.h", "string.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def layer_of_include(path):
    """Layer index of an included path, or None when it is not Sluice code."""
    parts = path.split("/")
    if parts[0] == "core" and len(parts) > 2 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    if parts[0] == "sluice" and len(parts) == 2:
        layer = PUBLIC_LAYER.get(parts[1])
        return LAYERS.index(layer) if layer else CLIENT
    if parts[0] in ("client", "server", "worker", "tools"):
        return CLIENT
    return None


def check(src):
    errors = []
    core = os.path.join(src, "core")
    for name in sorted(os.listdir(core)):
        full = os.path.join(core, name)
        if os.path.isfile(full) and name not in ("CMakeLists.txt", "README.md"):
            errors.append(f"core/{name}: source file directly in core/ (belongs in a layer folder)")
        elif os.path.isdir(full) and name not in LAYERS:
            errors.append(f"core/{name}/: not a known layer (add it to LAYERS in order)")
    for root, _, files in os.walk(core):
        for name in sorted(files):
            if not name.endswith((".h", ".cc", ".inc")):
                continue
            rel = os.path.relpath(os.path.join(root, name), src)
            parts = rel.split("/")
            if len(parts) < 3 or parts[1] not in LAYERS:
                continue  # reported above
            own = LAYERS.index(parts[1])
            text = open(os.path.join(src, rel), encoding="utf-8").read()
            for kind, inc in INCLUDE.findall(text):
                if inc.startswith("grpcpp/") or inc.startswith("grpc/") or inc.endswith(".grpc.pb.h"):
                    if parts[1] != "rpc":
                        errors.append(f"{rel}: includes {inc}; only core/rpc/ may use gRPC")
                    continue
                layer = layer_of_include(inc) if kind == '"' else None
                if layer is not None and layer > own:
                    above = LAYERS[layer] if layer < CLIENT else "client"
                    errors.append(f"{rel}: includes {inc} (layer {above}) from layer {parts[1]}; "
                                  "a layer includes only itself and the layers below it")
    public = os.path.join(src, "include", "sluice")
    for name in sorted(os.listdir(public)):
        rel = f"include/sluice/{name}"
        text = open(os.path.join(public, name), encoding="utf-8").read()
        for kind, inc in INCLUDE.findall(text):
            if inc.startswith("sluice/") or inc.startswith("absl/"):
                continue
            if kind == "<" and "/" not in inc and (not inc.endswith(".h") or inc in C_STD):
                continue  # the standard library
            errors.append(f"{rel}: includes {inc}; public headers include only sluice/*, "
                          "the standard library and Abseil")
    return errors


def main():
    if len(sys.argv) != 2:
        print("usage: check_layers.py SOURCE_DIR", file=sys.stderr)
        return 2
    errors = check(sys.argv[1])
    for e in errors:
        print(e)
    print(f"check_layers: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
