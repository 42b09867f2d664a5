# SPDX-License-Identifier: Apache-2.0
"""Tests for tools/check_layers.py: it must flag an upward include and another folder's
detail namespace, and pass a tree that follows the layer order.

Run: /usr/bin/python3 -m unittest discover -s tests/python -v   (from the repo root)
"""

import os
import pathlib
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "tools")))

import check_layers as cl  # noqa: E402


def make_tree(test, files):
    """Writes files under a new temporary root, removed when `test` ends."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="edgellm-layers-"))
    test.addCleanup(shutil.rmtree, root, ignore_errors=True)
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


class CheckLayersTest(unittest.TestCase):
    def test_clean_tree_passes(self):
        root = make_tree(self, {
            "result.hpp": "#pragma once\n",
            "kernels/gemv.hpp": '#include "edgellm/result.hpp"\n#include "edgellm/io/x.hpp"\n',
            "io/x.hpp": '#include "edgellm/detail/bytes.hpp"\nedgellm::detail::f();\n',
            "detail/bytes.hpp": "#pragma once\n",
            "decode/gen.hpp": '#include "edgellm/model/t.hpp"\n',
            "model/t.hpp": '#include "edgellm/backend/cpu.hpp"\n',
            "backend/cpu.hpp": '#include "edgellm/cache/c.hpp"\n// cache::detail in a comment\n',
            "cache/c.hpp": "namespace edgellm::cache::detail {}\ncache::detail::g();\n",
        })
        self.assertEqual(cl.check(root), [])

    def test_upward_include_is_flagged(self):
        root = make_tree(self, {
            "model/transformer.hpp": '#include "edgellm/decode/model.hpp"\n',
            "decode/model.hpp": "#pragma once\n",
        })
        problems = cl.check(root)
        self.assertEqual(len(problems), 1)
        self.assertIn("transformer.hpp:1", problems[0])
        self.assertIn("decode/model.hpp", problems[0])

    def test_vulkan_stays_in_its_folder(self):
        root = make_tree(self, {
            "backend/vulkan/device.hpp": '#include <vulkan/vulkan.h>\n#include "edgellm/result.hpp"\n',
            "backend/vulkan/op.hpp": '#include "edgellm/backend/vulkan/device.hpp"\n',
            "result.hpp": "#pragma once\n",
        })
        self.assertEqual(cl.check(root), [])
        root = make_tree(self, {
            "backend/vulkan/device.hpp": "#pragma once\n",
            "backend/cpu.hpp": '#include <vulkan/vulkan_core.h>\n',
            "edgellm.hpp": '#include "edgellm/backend/vulkan/device.hpp"\n',
        })
        problems = cl.check(root)
        self.assertEqual(len(problems), 2)
        self.assertTrue(any("cpu.hpp:1" in p and "vulkan/vulkan_core.h" in p for p in problems))
        self.assertTrue(any("edgellm.hpp:1" in p and "optional" in p for p in problems))

    def test_foreign_detail_is_flagged(self):
        root = make_tree(self, {
            "decode/prompt_cache.hpp": "auto x = cache::detail::checksum64(b);\n",
        })
        problems = cl.check(root)
        self.assertEqual(len(problems), 1)
        self.assertIn("cache::detail", problems[0])

    def test_c_api_header_stands_alone(self):
        root = make_tree(self, {
            "session.hpp": "#pragma once\n",
            "c/edgellm.h": "#include <stddef.h>\n#include <stdint.h>\n",
        })
        self.assertEqual(cl.check(root), [])
        root = make_tree(self, {
            "session.hpp": "#pragma once\n",
            "c/edgellm.h": '#include <stddef.h>\n#include "edgellm/result.hpp"\n',
        })
        problems = cl.check(root)
        self.assertEqual(len(problems), 1)
        self.assertIn("edgellm.h:2", problems[0])

    def test_cpp_header_including_c_api_is_flagged(self):
        root = make_tree(self, {
            "session.hpp": '#include <edgellm/c/edgellm.h>\n',
            "c/edgellm.h": "#include <stddef.h>\n",
        })
        problems = cl.check(root)
        self.assertEqual(len(problems), 1)
        self.assertIn("session.hpp:1", problems[0])

    def test_unknown_folder_is_flagged(self):
        root = make_tree(self, {"gizmo/a.hpp": "#pragma once\n"})
        self.assertEqual(len(cl.check(root)), 1)


if __name__ == "__main__":
    unittest.main()
