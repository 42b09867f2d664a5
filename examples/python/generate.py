#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Streams text from an edgellm model through the C API with ctypes (nothing to install): load,
generate with a token callback, cancel from the callback after N tokens, print the statistics.

    python3 examples/python/generate.py [--lib build/release/lib/libedgellm_c.so]
        [--model models/kjv-target-awq] [--prompt TEXT] [--max-tokens N] [--cancel-after N]

The library is --lib, else $EDGELLM_C_LIB, else build/*/lib/libedgellm_c.so of this checkout,
else whatever the dynamic loader finds as libedgellm_c. Any FFI works the same way: mirror the
structs of include/edgellm/c/edgellm.h, check every status, read edgellm_last_error() on failure.
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
STOP_REASONS = ["eos", "stop string", "max tokens", "context full", "callback"]


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
    sigs = {
        "edgellm_last_error": (ctypes.c_char_p, []),
        "edgellm_status_string": (ctypes.c_char_p, [c_status]),
        "edgellm_build_info": (ctypes.c_char_p, []),
        "edgellm_model_options_default": (ModelOptions, []),
        "edgellm_model_load": (c_status, [ctypes.c_char_p, ctypes.POINTER(ModelOptions),
                                          ctypes.POINTER(ctypes.c_void_p)]),
        "edgellm_model_free": (None, [ctypes.c_void_p]),
        "edgellm_sampling_greedy": (Sampling, []),
        "edgellm_session_options_default": (SessionOptions, []),
        "edgellm_session_create": (c_status, [ctypes.c_void_p, ctypes.POINTER(SessionOptions),
                                              ctypes.POINTER(ctypes.c_void_p)]),
        "edgellm_session_free": (None, [ctypes.c_void_p]),
        "edgellm_generate_options_default": (GenerateOptions, []),
        "edgellm_generate": (c_status, [ctypes.c_void_p, ctypes.c_char_p,
                                        ctypes.POINTER(GenerateOptions), TokenCallback,
                                        ctypes.c_void_p, ctypes.POINTER(GenerationStats)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", help="path of libedgellm_c.so")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-target-awq"))
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--cancel-after", type=int, default=0,
                    help="stop from the callback after this many pieces of text (0: never)")
    args = ap.parse_args()

    api = load_api(find_library(args.lib))

    def check(status, what):
        if status != 0:
            sys.exit(f"{what}: {api.edgellm_status_string(status).decode()}: "
                     f"{api.edgellm_last_error().decode()}")

    print(api.edgellm_build_info().decode(), file=sys.stderr)
    model, session = ctypes.c_void_p(), ctypes.c_void_p()
    check(api.edgellm_model_load(args.model.encode(), None, ctypes.byref(model)), "load")
    try:
        so = api.edgellm_session_options_default()
        so.sampling = api.edgellm_sampling_greedy()
        check(api.edgellm_session_create(model, ctypes.byref(so), ctypes.byref(session)),
              "session")
        go = api.edgellm_generate_options_default()
        go.max_new_tokens = args.max_tokens
        pieces = 0

        def on_token(text, text_len, token, user_data):
            # No exception may escape into C: ctypes prints and ignores one, so keep it simple.
            nonlocal pieces
            sys.stdout.write(ctypes.string_at(text, text_len).decode("utf-8"))
            sys.stdout.flush()
            pieces += 1
            return 0 if args.cancel_after and pieces >= args.cancel_after else 1

        callback = TokenCallback(on_token)  # keep a reference while C may call it
        stats = GenerationStats()
        sys.stdout.write(args.prompt)
        check(api.edgellm_generate(session, args.prompt.encode(), ctypes.byref(go), callback,
                                   None, ctypes.byref(stats)), "generate")
        print()
        print(f"[{stats.prompt_tokens} prompt tokens, {stats.new_tokens} generated; "
              f"stop: {STOP_REASONS[stats.stop_reason]}; time to first token "
              f"{stats.time_to_first_token_s * 1e3:.1f} ms]")
    finally:
        api.edgellm_session_free(session)  # both accept NULL
        api.edgellm_model_free(model)


if __name__ == "__main__":
    main()
