#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Streams text from an edgellm model through the C API with ctypes (nothing to install): load,
generate with a token callback, cancel from the callback after N tokens, constrain the output
(structured output: a JSON Schema, or one of some choices), print the statistics.

    python3 examples/python/generate.py [--lib build/release/lib/libedgellm_c.so]
        [--model models/kjv-target-awq] [--prompt TEXT] [--max-tokens N] [--context N]
        [--cancel-after N] [--json-schema FILE|JSON | --choice TEXT [--choice TEXT ...]]
        [--memory-budget phone|BYTES]

The library is --lib, else $EDGELLM_C_LIB, else build/*/lib/libedgellm_c.so of this checkout,
else whatever the dynamic loader finds as libedgellm_c. Any FFI works the same way: mirror the
structs of include/edgellm/c/edgellm.h, check every status, read edgellm_last_error() on failure
(here: EdgellmError, which carries the status). Text crosses as UTF-8 bytes; bytes that are not
UTF-8 (a prompt or path from a non-UTF-8 command line, a message naming such a path) are shown
with U+FFFD, never a traceback.
"""
import argparse
import ctypes
import ctypes.util
import glob
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# ---- the C header's types -----------------------------------------------------------------

c_status = ctypes.c_int  # edgellm_status; EDGELLM_OK == 0
ERR_INVALID_ARGUMENT, ERR_BUSY = 1, 10
STOP_REASONS = ["eos", "stop string", "max tokens", "context full", "callback"]
# edgellm_constraint_kind
(CONSTRAINT_JSON, CONSTRAINT_JSON_OBJECT, CONSTRAINT_JSON_SCHEMA, CONSTRAINT_GRAMMAR,
 CONSTRAINT_REGEX, CONSTRAINT_CHOICES) = range(6)
UINT32_MAX = 0xFFFFFFFF


class ModelOptions(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int32), ("backend", ctypes.c_char_p),
                ("lm_head", ctypes.c_char_p), ("packed_cache", ctypes.c_char_p),
                ("load_tokenizer", ctypes.c_int32), ("memory_budget_bytes", ctypes.c_uint64)]


class Sampling(ctypes.Structure):
    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repetition_penalty", ctypes.c_float), ("penalty_last_n", ctypes.c_int32),
                ("seed", ctypes.c_uint64)]


class SessionOptions(ctypes.Structure):
    _fields_ = [("kv_type", ctypes.c_int), ("context_size", ctypes.c_uint32),
                ("max_batch", ctypes.c_uint32), ("sampling", Sampling),
                ("draft", ctypes.c_void_p), ("prompt_lookup", ctypes.c_int32),
                ("draft_tokens", ctypes.c_uint32)]


class GenerateOptions(ctypes.Structure):
    _fields_ = [("max_new_tokens", ctypes.c_uint32),
                ("stop_strings", ctypes.POINTER(ctypes.c_char_p)),
                ("n_stop_strings", ctypes.c_size_t), ("ignore_eos", ctypes.c_int32),
                ("add_special", ctypes.c_int32), ("parse_special", ctypes.c_int32)]


class GenerationStats(ctypes.Structure):
    _fields_ = [("prompt_tokens", ctypes.c_uint32), ("new_tokens", ctypes.c_uint32),
                ("prefill_s", ctypes.c_double), ("decode_s", ctypes.c_double),
                ("time_to_first_token_s", ctypes.c_double), ("stop_reason", ctypes.c_int)]


TokenCallback = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t,
                                 ctypes.c_int32, ctypes.c_void_p)


def text(data):
    """UTF-8 bytes from the library as str; invalid sequences become U+FFFD."""
    return data.decode("utf-8", errors="replace") if data is not None else ""


class EdgellmError(Exception):
    """A failed edgellm call: status is the edgellm_status (ERR_BUSY, ...), message the
    library's edgellm_last_error(), which names the file, tensor or argument."""

    def __init__(self, what, status, status_name, message):
        super().__init__(f"{what}: {status_name}: {message}")
        self.status, self.message = status, message


def find_library(explicit):
    if explicit:
        return explicit
    if os.environ.get("EDGELLM_C_LIB"):
        return os.environ["EDGELLM_C_LIB"]
    built = sorted(glob.glob(os.path.join(ROOT, "build", "*", "lib", "libedgellm_c.so")))
    if built:
        return built[0]
    return ctypes.util.find_library("edgellm_c") or "libedgellm_c.so"


def load_api(path):
    lib = ctypes.CDLL(path)
    session, status = ctypes.c_void_p, c_status
    sigs = {
        "edgellm_last_error": (ctypes.c_char_p, []),
        "edgellm_status_string": (ctypes.c_char_p, [status]),
        "edgellm_build_info": (ctypes.c_char_p, []),
        "edgellm_model_options_default": (ModelOptions, []),
        "edgellm_model_load": (status, [ctypes.c_char_p, ctypes.POINTER(ModelOptions),
                                        ctypes.POINTER(ctypes.c_void_p)]),
        "edgellm_model_free": (None, [ctypes.c_void_p]),
        "edgellm_fit_budget": (status, [ctypes.c_char_p, ctypes.c_uint64,
                                        ctypes.POINTER(ModelOptions),
                                        ctypes.POINTER(SessionOptions), ctypes.c_void_p,
                                        ctypes.c_char_p, ctypes.c_size_t]),
        "edgellm_sampling_greedy": (Sampling, []),
        "edgellm_session_options_default": (SessionOptions, []),
        "edgellm_session_create": (status, [ctypes.c_void_p, ctypes.POINTER(SessionOptions),
                                            ctypes.POINTER(ctypes.c_void_p)]),
        "edgellm_session_free": (None, [session]),
        "edgellm_session_reset": (status, [session]),
        "edgellm_session_context_size": (ctypes.c_size_t, [session]),
        "edgellm_generate_options_default": (GenerateOptions, []),
        "edgellm_generate": (status, [session, ctypes.c_char_p, ctypes.POINTER(GenerateOptions),
                                      TokenCallback, ctypes.c_void_p,
                                      ctypes.POINTER(GenerationStats)]),
        "edgellm_constraint_compile": (status, [ctypes.c_int, ctypes.c_char_p,
                                                ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                                ctypes.POINTER(ctypes.c_void_p)]),
        "edgellm_constraint_free": (None, [ctypes.c_void_p]),
        "edgellm_session_set_constraint": (status, [session, ctypes.c_void_p]),
        "edgellm_session_constraint_result": (status, [session, ctypes.POINTER(ctypes.c_int32),
                                                       ctypes.POINTER(ctypes.c_int32)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def check(api, status, what):
    """Raises EdgellmError for a failed call (status != EDGELLM_OK)."""
    if status != 0:
        raise EdgellmError(what, status, text(api.edgellm_status_string(status)),
                           text(api.edgellm_last_error()))


def compile_constraint(api, kind, source=None, choices=()):
    """A new edgellm_constraint (free it with edgellm_constraint_free). source: bytes (a JSON
    Schema's text, a GBNF grammar, a pattern) or None; choices: bytes each, for CONSTRAINT_CHOICES."""
    array = (ctypes.c_char_p * len(choices))(*choices) if choices else None
    constraint = ctypes.c_void_p()
    check(api, api.edgellm_constraint_compile(kind, source, array, len(choices),
                                              ctypes.byref(constraint)), "constraint")
    return constraint


def schema_text(arg):
    """--json-schema's argument: the schema itself when it looks like JSON, else a file."""
    if arg.lstrip().startswith("{") or arg.strip() == "true":
        return os.fsencode(arg)
    try:
        with open(arg, "rb") as f:
            return f.read()
    except OSError as e:
        sys.exit(f"--json-schema: {arg}: {e.strerror}")


def count_arg(lowest, minus_one=None):
    """An argparse type: an integer in [lowest, 2^32 - 1], or -1 when minus_one says what it
    means (the C API's counts are uint32_t: -1 would wrap to 4294967295)."""
    def parse(s):
        try:
            n = int(s)
            if lowest <= n <= UINT32_MAX or (minus_one and n == -1):
                return n
        except ValueError:
            pass
        also = f", or -1 ({minus_one})" if minus_one else ""
        raise argparse.ArgumentTypeError(f"{s} is not an integer in [{lowest}, {UINT32_MAX}]{also}")
    return parse


def budget_arg(s):
    """--memory-budget's argument: "phone" (EDGELLM_BUDGET_PHONE, 0) or a positive byte count."""
    if s == "phone":
        return 0
    try:
        n = int(s)
        if 0 < n < 2**64:
            return n
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{s} is neither 'phone' nor a positive number of bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", help="path of libedgellm_c.so")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-target-awq"))
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("--max-tokens", type=count_arg(1, "until the end of text or the context"),
                    default=64, help="tokens to generate; -1: until the end of text or the context")
    ap.add_argument("--context", type=count_arg(0), default=0,
                    help="tokens the session holds (0: the model's default)")
    ap.add_argument("--cancel-after", type=count_arg(0), default=0,
                    help="stop from the callback after this many pieces of text (0: never)")
    constrain = ap.add_mutually_exclusive_group()
    constrain.add_argument("--json-schema", metavar="FILE|JSON",
                           help="constrain the output to JSON valid against this JSON Schema")
    constrain.add_argument("--choice", action="append", metavar="TEXT",
                           help="constrain the output to exactly one of the choices (repeat it)")
    ap.add_argument("--memory-budget", type=budget_arg, metavar="phone|BYTES",
                    help="choose the lm_head format, KV type and context to fit this budget "
                         "(edgellm_fit_budget) before loading")
    args = ap.parse_args()
    # Text that is not valid in the terminal's encoding is shown as '?' or U+FFFD, not raised.
    sys.stdout.reconfigure(errors="replace")
    sys.stderr.reconfigure(errors="replace")
    # The command line's own bytes (os.fsencode undoes Python's surrogateescape).
    prompt, model_dir = os.fsencode(args.prompt), os.fsencode(args.model)

    schema = schema_text(args.json_schema) if args.json_schema is not None else None

    api = load_api(find_library(args.lib))
    print(text(api.edgellm_build_info()), file=sys.stderr)
    model, session, constraint = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    echoed = False
    try:
        # Compiled before the model is loaded: a bad schema is reported at once.
        if schema is not None:
            constraint = compile_constraint(api, CONSTRAINT_JSON_SCHEMA, schema)
        elif args.choice:
            constraint = compile_constraint(api, CONSTRAINT_CHOICES,
                                            choices=[os.fsencode(c) for c in args.choice])
        mo = api.edgellm_model_options_default()
        so = api.edgellm_session_options_default()
        so.sampling = api.edgellm_sampling_greedy()
        so.context_size = args.context
        if args.memory_budget is not None:
            note = ctypes.create_string_buffer(512)
            check(api, api.edgellm_fit_budget(model_dir, args.memory_budget, ctypes.byref(mo),
                                              ctypes.byref(so), None, note, len(note)),
                  "memory budget")
            print(f"memory budget: {text(note.value) or 'fits as given'}; lm_head "
                  f"{text(mo.lm_head)}, {so.context_size} tokens", file=sys.stderr)
        check(api, api.edgellm_model_load(model_dir, ctypes.byref(mo), ctypes.byref(model)), "load")
        check(api, api.edgellm_session_create(model, ctypes.byref(so), ctypes.byref(session)),
              "session")
        if constraint:
            # The session keeps its own reference: the constraint could be freed here already.
            check(api, api.edgellm_session_set_constraint(session, constraint), "constraint")
        go = api.edgellm_generate_options_default()
        # -1: as many as the context holds; generation ends earlier at the model's eos.
        go.max_new_tokens = (args.max_tokens if args.max_tokens != -1
                             else api.edgellm_session_context_size(session))
        pieces, raised = 0, []

        def on_token(piece, piece_len, token, user_data):
            # No exception may escape into C (ctypes would print it and go on): keep it, stop.
            nonlocal pieces
            try:
                sys.stdout.write(text(ctypes.string_at(piece, piece_len)))
                sys.stdout.flush()
                pieces += 1
                return 0 if args.cancel_after and pieces >= args.cancel_after else 1
            except BaseException as e:  # BrokenPipeError, KeyboardInterrupt too
                raised.append(e)
                return 0

        callback = TokenCallback(on_token)  # keep a reference while C may call it
        stats = GenerationStats()
        sys.stdout.write(text(prompt))
        echoed = True
        check(api, api.edgellm_generate(session, prompt, ctypes.byref(go), callback, None,
                                        ctypes.byref(stats)), "generate")
        if raised:
            raise raised[0]
        print()
        print(f"[{stats.prompt_tokens} prompt tokens, {stats.new_tokens} generated; "
              f"stop: {STOP_REASONS[stats.stop_reason]}; time to first token "
              f"{stats.time_to_first_token_s * 1e3:.1f} ms]")
        if constraint:
            complete, forced = ctypes.c_int32(), ctypes.c_int32()
            check(api, api.edgellm_session_constraint_result(session, ctypes.byref(complete),
                                                             ctypes.byref(forced)), "constraint")
            print("[constraint: " + ("a whole document" if complete.value else
                                     "not a whole document") +
                  ("; the token budget forced the closing" if forced.value else "") + "]")
        if (args.cancel_after and pieces >= args.cancel_after
                and STOP_REASONS[stats.stop_reason] != "callback"):
            sys.exit("the callback returned 0 but generation went on")
    except EdgellmError as e:
        if echoed:
            print()
        sys.exit(str(e))
    except BrokenPipeError:
        # stdout went away (| head): no second error when Python flushes it at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    finally:
        api.edgellm_session_free(session)  # all three accept NULL
        api.edgellm_model_free(model)
        api.edgellm_constraint_free(constraint)


if __name__ == "__main__":
    main()
