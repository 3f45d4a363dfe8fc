#!/usr/bin/env python3
"""Proves check_layers.py catches each kind of violation: a fake tree per rule, one bad file."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402


def make_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


GOOD = {
    "core/util/status.h": "#include <string>\n",
    "core/tensor/t.cc": '#include "core/util/status.h"\n#include "sluice/tensor.h"\n',
    "core/rpc/g.cc": '#include <grpcpp/grpcpp.h>\n#include "core/data/x.h"\n',
    "core/data/ops/op.cc": '#include "core/data/iterator.h"\n#include "core/io/r.h"\n',
    "include/sluice/tensor.h": '#include <vector>\n#include <stdint.h>\n#include "absl/status/status.h"\n',
}


class CheckLayersTest(unittest.TestCase):
    def errors(self, extra):
        with tempfile.TemporaryDirectory() as root:
            make_tree(root, {**GOOD, **extra})
            return check_layers.check(root)

    def test_good_tree_passes(self):
        self.assertEqual(self.errors({}), [])

    def test_wrong_way_include(self):
        errs = self.errors({"core/io/r.cc": '#include "core/data/dataset_limits.h"\n'})
        self.assertEqual(len(errs), 1)
        self.assertIn("core/io/r.cc", errs[0])
        self.assertIn("layer data", errs[0])

    def test_core_includes_client(self):
        errs = self.errors({"core/data/d.cc": '#include "sluice/strategy.h"\n'})
        self.assertEqual(len(errs), 1)
        self.assertIn("client", errs[0])

    def test_public_header_of_higher_layer(self):
        errs = self.errors({"core/util/u.cc": '#include "sluice/dataset.h"\n'})
        self.assertEqual(len(errs), 1)

    def test_grpc_outside_rpc(self):
        errs = self.errors({"core/obs/m.h": "#include <grpcpp/server.h>\n"})
        self.assertEqual(len(errs), 1)
        self.assertIn("only core/rpc/", errs[0])

    def test_file_directly_in_core(self):
        errs = self.errors({"core/loose.cc": "\n"})
        self.assertEqual(len(errs), 1)
        self.assertIn("directly in core/", errs[0])

    def test_unknown_folder(self):
        errs = self.errors({"core/misc/m.cc": "\n"})
        self.assertTrue(any("not a known layer" in e for e in errs))

    def test_public_header_includes_internal(self):
        errs = self.errors({"include/sluice/d.h": '#include "proto/dataset.pb.h"\n'})
        self.assertEqual(len(errs), 1)
        self.assertIn("public headers", errs[0])


if __name__ == "__main__":
    unittest.main()
