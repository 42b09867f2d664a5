#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ctest c_api.python: examples/python/generate.py over the C API with ctypes. The example as
documented, its command line (--max-tokens -1 means "until the end of text or the context";
0, -2, 2^32 are argparse errors, not wrapped into uint32_t), bytes that are not UTF-8 in the
prompt and the model path (a message, never a traceback), a context beyond the model's
positions, constrained output (--choice: exactly one of the choices; --json-schema: JSON that
parses and has the schema's properties; a schema refused with the keyword named), and the
example's module as a wrapper: EdgellmError carries EDGELLM_ERR_BUSY for a call on a session
from inside its own token callback, and a free from there is deferred.

    python3 tests/c/python_example_test.py --lib build/release/lib/libedgellm_c.so
"""
import argparse
import ctypes
import importlib.util
import json
import os
import subprocess
import sys
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "python", "generate.py")
MODEL = os.path.join(ROOT, "models", "kjv-target-awq")
LIB = None  # set from --lib in __main__


def load_example():
    spec = importlib.util.spec_from_file_location("edgellm_generate_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(*args):
    """The example's exit status, stdout and stderr (bytes: the command line may hold any)."""
    cmd = [sys.executable, EXAMPLE, "--lib", LIB] + list(args)
    p = subprocess.run(cmd, capture_output=True, timeout=60, cwd=ROOT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


class CommandLine(unittest.TestCase):
    def assert_no_traceback(self, err):
        self.assertNotIn("Traceback", err)

    def test_cancel_from_the_callback(self):
        rc, out, err = run_example("--max-tokens", "8", "--cancel-after", "5")
        self.assertEqual(rc, 0, err)
        self.assertIn("5 generated; stop: callback", out)

    def test_max_tokens_minus_one_runs_to_the_end_of_text_or_the_context(self):
        rc, out, err = run_example("--max-tokens", "-1", "--context", "48")
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"generated; stop: (eos|context full)")
        self.assertNotIn("4294967295", out + err)

    def test_counts_out_of_range_are_usage_errors(self):
        for bad in ["0", "-2", "4294967296", "x"]:
            rc, out, err = run_example("--max-tokens", bad)
            self.assertEqual(rc, 2, f"--max-tokens {bad}: {err}")
            self.assertIn("argument --max-tokens:", err)
            self.assertIn("-1 (until the end of text or the context)", err)
            self.assert_no_traceback(err)
        rc, _, err = run_example("--cancel-after", "-1")
        self.assertEqual(rc, 2, err)
        self.assertIn("argument --cancel-after: -1 is not an integer in [0, 4294967295]", err)

    def test_prompt_that_is_not_utf8(self):
        rc, out, err = run_example("--max-tokens", "4", "--prompt", b"And \xff God")
        self.assert_no_traceback(err)
        self.assertEqual(rc, 1, err)
        self.assertIn("And \ufffd God", out)
        self.assertIn("generate: invalid argument:", err)
        self.assertIn("not valid UTF-8", err)

    def test_model_path_that_is_not_utf8(self):
        rc, _, err = run_example("--max-tokens", "4", "--model", b"/nonexistent/\xff")
        self.assert_no_traceback(err)
        self.assertEqual(rc, 1, err)
        self.assertIn("load: I/O error:", err)
        self.assertIn("/nonexistent/\ufffd", err)

    def test_memory_budget(self):
        rc, out, err = run_example("--max-tokens", "4", "--memory-budget", "phone")
        self.assertEqual(rc, 0, err)
        self.assertIn("memory budget: fits as given; lm_head stored", err)
        rc, _, err = run_example("--max-tokens", "4", "--memory-budget", "1048576")
        self.assert_no_traceback(err)
        self.assertEqual(rc, 1, err)
        self.assertIn("memory budget: out of memory:", err)
        self.assertIn("nothing fits the budget of 1.0 MiB", err)
        rc, _, err = run_example("--memory-budget", "lots")
        self.assertEqual(rc, 2, err)
        self.assertIn("neither 'phone' nor a positive number of bytes", err)

    def test_context_beyond_the_model_positions(self):
        rc, _, err = run_example("--context", "100000")
        self.assert_no_traceback(err)
        self.assertEqual(rc, 1, err)
        self.assertIn("context_size: 100000 is above the model's max_position_embeddings 2048",
                      err)


class Constrained(unittest.TestCase):
    """--choice and --json-schema: the output is a whole document of the constraint."""

    def generated(self, prompt, out):
        """The text the example printed after echoing prompt, up to its statistics line."""
        self.assertTrue(out.startswith(prompt), out)
        return out[len(prompt):out.index("\n[")]

    def test_choice(self):
        prompt, choices = "And God said, Let there be", ["light", "darkness", "the waters"]
        args = ["--prompt", prompt, "--max-tokens", "160"]  # far above the choices: not forced
        for c in choices:
            args += ["--choice", c]
        rc, out, err = run_example(*args)
        self.assertEqual(rc, 0, err)
        self.assertIn(self.generated(prompt, out), choices)
        self.assertIn("stop: eos", out)
        self.assertIn("[constraint: a whole document]", out)

    def test_json_schema(self):
        schema = ('{"type":"object","properties":{"name":{"type":"string","maxLength":12},'
                  '"age":{"type":"integer","minimum":0,"maximum":150}},'
                  '"required":["name","age"],"additionalProperties":false}')
        rc, out, err = run_example("--prompt", "And God said", "--max-tokens", "48",
                                   "--json-schema", schema)
        self.assertEqual(rc, 0, err)
        value = json.loads(self.generated("And God said", out))
        self.assertEqual(sorted(value), ["age", "name"])
        self.assertIsInstance(value["age"], int)
        self.assertTrue(0 <= value["age"] <= 150 and len(value["name"]) <= 12, value)
        self.assertIn("[constraint: a whole document", out)

    def test_refused_schema_names_the_keyword(self):
        rc, out, err = run_example("--json-schema", '{"type":"object","not":{}}')
        self.assertNotIn("Traceback", err)
        self.assertEqual(rc, 1, err)
        self.assertIn("constraint: unsupported:", err)
        self.assertIn('"not"', err)
        self.assertEqual(out, "")  # refused before the model is loaded and the prompt echoed

    def test_schema_file_that_does_not_exist(self):
        rc, _, err = run_example("--json-schema", "/nonexistent/schema.json")
        self.assertNotIn("Traceback", err)
        self.assertEqual(rc, 1, err)
        self.assertIn("--json-schema: /nonexistent/schema.json:", err)

    def test_one_constraint_at_a_time(self):
        rc, _, err = run_example("--choice", "a", "--json-schema", "{}")
        self.assertEqual(rc, 2, err)
        self.assertIn("not allowed with argument", err)


class Reentrancy(unittest.TestCase):
    """The example's module as a ctypes wrapper: calls back into the session from its own
    token callback."""

    @classmethod
    def setUpClass(cls):
        cls.g = load_example()
        cls.api = cls.g.load_api(LIB)
        cls.model = ctypes.c_void_p()
        cls.g.check(cls.api, cls.api.edgellm_model_load(os.fsencode(MODEL), None,
                                                       ctypes.byref(cls.model)), "load")

    @classmethod
    def tearDownClass(cls):
        cls.api.edgellm_model_free(cls.model)

    def new_session(self):
        g, api = self.g, self.api
        so = api.edgellm_session_options_default()
        so.sampling = api.edgellm_sampling_greedy()
        so.context_size = 128
        session = ctypes.c_void_p()
        g.check(api, api.edgellm_session_create(self.model, ctypes.byref(so),
                                                ctypes.byref(session)), "session")
        return session

    def generate(self, session, on_piece, n=6):
        g, api = self.g, self.api
        go = api.edgellm_generate_options_default()
        go.max_new_tokens = n
        go.ignore_eos = 1
        stats = g.GenerationStats()
        callback = g.TokenCallback(on_piece)
        g.check(api, api.edgellm_generate(session, b"And God said", ctypes.byref(go), callback,
                                          None, ctypes.byref(stats)), "generate")
        return stats

    def test_calls_from_the_callback_raise_busy(self):
        g, api = self.g, self.api
        session = self.new_session()
        errors, pieces = [], []

        def on_piece(piece, piece_len, token, user_data):
            pieces.append(ctypes.string_at(piece, piece_len))
            for what, call in [("reset", lambda: api.edgellm_session_reset(session)),
                               ("generate", lambda: api.edgellm_generate(
                                   session, b"In the beginning", None, g.TokenCallback(0),
                                   None, None))]:
                try:
                    g.check(api, call(), what)
                    errors.append(None)
                except g.EdgellmError as e:
                    errors.append(e)
            return 1

        try:
            stats = self.generate(session, on_piece)
            self.assertEqual(stats.new_tokens, 6)
            self.assertEqual(g.STOP_REASONS[stats.stop_reason], "max tokens")
            self.assertTrue(errors)
            for e in errors:
                self.assertIsInstance(e, g.EdgellmError)
                self.assertEqual(e.status, g.ERR_BUSY)
                self.assertIn("session busy", str(e))
                self.assertIn("busy in edgellm_generate", e.message)
            # Nothing changed: the same text as an undisturbed session.
            plain = self.new_session()
            want = []
            self.generate(plain, lambda p, n, t, u: want.append(ctypes.string_at(p, n)) or 1)
            api.edgellm_session_free(plain)
            self.assertEqual(b"".join(pieces), b"".join(want))
        finally:
            api.edgellm_session_free(session)

    def test_free_from_the_callback_is_deferred(self):
        g, api = self.g, self.api
        session = self.new_session()
        calls = []

        def on_piece(piece, piece_len, token, user_data):
            calls.append(token)
            api.edgellm_session_free(session)
            calls.append(g.text(api.edgellm_last_error()))
            return 1

        stats = self.generate(session, on_piece)
        self.assertEqual(len(calls), 2, calls)
        self.assertEqual(g.STOP_REASONS[stats.stop_reason], "callback")
        self.assertIn("freed when that call returns", calls[1])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="path of libedgellm_c.so")
    args, rest = ap.parse_known_args()
    LIB = os.path.abspath(args.lib)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
