#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks include/edgellm against the layer order written in README.md ("Architecture").

A header may include only headers of its own layer or lower ones, and no code may name
another folder's `detail` namespace (`edgellm::detail`, the bottom layer, is shared by all).
Vulkan is optional: only headers under backend/vulkan/ (and session/vulkan.hpp, the Session on
a device) include the Vulkan headers or a backend/vulkan/ header, so that nothing else needs
Vulkan to compile.
The C API (`c/*.h`) stands apart: a plain C header that includes no edgellm header, and that no
C++ header includes (bindings/c/ implements it over session.hpp).
Exit status 0 when the tree follows the rules; otherwise every violation is printed as
`file:line: message` and the status is 1.

    /usr/bin/python3 tools/check_layers.py [--root include/edgellm]
"""
import argparse
import pathlib
import re
import sys

# Lowest first. A key is a folder under include/edgellm/ or a top-level header.
LAYERS = [
    ("detail/", "result.hpp", "config.hpp"),
    ("io/", "thread_pool.hpp"),
    ("kernels/",),
    ("cache/",),
    ("backend/",),
    ("model/", "quant/"),
    ("decode/",),
    ("constrain/",),
    ("session/", "session.hpp", "plan.hpp"),
    ("edgellm.hpp", "kernels.hpp", "model.hpp", "decode.hpp"),  # umbrellas
]

INCLUDE = re.compile(r'^\s*#\s*include\s*"edgellm/([^"]+)"')
# The C API's folder, and any include of an edgellm header (quoted or angled) from it.
C_API = "c/"
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]edgellm/([^">]+)[">]')
# The optional Vulkan backend's folder, and includes that need the Vulkan headers.
VULKAN = "backend/vulkan/"
VULKAN_HEADERS = (VULKAN, "session/vulkan.hpp")
VULKAN_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](vulkan/[^">]+|edgellm/backend/vulkan/[^">]+)[">]')
# Folder namespaces whose `detail` is private to the folder.
FOLDER_DETAIL = re.compile(r"\b(io|kernels|cache|backend|model|quant|decode|constrain|session)::detail\b")


def layer_of(rel: str) -> int | None:
    """Layer index of a path relative to include/edgellm/, None when unknown."""
    for i, keys in enumerate(LAYERS):
        for k in keys:
            if (k.endswith("/") and rel.startswith(k)) or rel == k:
                return i
    return None


def folder_of(rel: str) -> str:
    return rel.split("/", 1)[0] if "/" in rel else ""


def check_c_api(path: pathlib.Path) -> list[str]:
    """A C API header includes no edgellm header (it is the whole contract, readable alone)."""
    problems = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = ANY_INCLUDE.match(line)
        if m:
            problems.append(f"{path}:{n}: includes edgellm/{m.group(1)}: a C API header "
                            "includes no edgellm header")
    return problems


def check(root: pathlib.Path) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.h")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(C_API):
            problems += check_c_api(path)
        else:
            problems.append(f"{path}:1: a C header outside {C_API} (C API headers live there)")
    for path in sorted(root.rglob("*.hpp")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(C_API):
            problems.append(f"{path}:1: a C++ header in {C_API}, which holds the C API only")
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = ANY_INCLUDE.match(line)
            if m and m.group(1).startswith(C_API):
                problems.append(f"{path}:{n}: includes edgellm/{m.group(1)}: no C++ header "
                                "includes the C API (bindings/c/ implements it)")
        if not rel.startswith(VULKAN_HEADERS):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                m = VULKAN_INCLUDE.match(line)
                if m:
                    problems.append(f"{path}:{n}: includes {m.group(1)}: only "
                                    f"{' and '.join(VULKAN_HEADERS)} may need Vulkan "
                                    "(it is optional)")
        own = layer_of(rel)
        if own is None:
            problems.append(f"{path}:1: not in any layer of tools/check_layers.py (add it)")
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line)
            if m:
                dep = m.group(1)
                theirs = layer_of(dep)
                if dep.startswith(C_API):
                    pass  # reported above
                elif theirs is None:
                    problems.append(f"{path}:{n}: includes {dep}, which is in no layer")
                elif theirs > own:
                    problems.append(
                        f"{path}:{n}: includes {dep} (layer {theirs}: {LAYERS[theirs][0]}) "
                        f"from layer {own} ({LAYERS[own][0]}): lower layers never include "
                        "higher ones")
            code = line.split("//", 1)[0]
            for d in FOLDER_DETAIL.finditer(code):
                if d.group(1) != folder_of(rel):
                    problems.append(
                        f"{path}:{n}: uses {d.group(0)} from {folder_of(rel) or 'the top level'}"
                        ": another folder's detail namespace is private (move what is shared "
                        "down, e.g. to edgellm/detail/)")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = pathlib.Path(__file__).resolve().parent.parent
    ap.add_argument("--root", type=pathlib.Path, default=here / "include" / "edgellm")
    args = ap.parse_args()
    problems = check(args.root)
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} violation(s) in {args.root}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
