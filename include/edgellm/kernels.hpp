// SPDX-License-Identifier: Apache-2.0
// Light umbrella: the CPU kernels alone (int4 formats and quantisers, AWQ import, exact and
// fast GEMV/GEMM with run-time ISA dispatch, dense matmuls, attention, elementwise ops, scalar
// twins) and
// the thread pool they run on. No tokenizer, JSON, checkpoints or model code.
#pragma once

#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include "edgellm/kernels/attention.hpp"
#include "edgellm/kernels/awq.hpp"
#include "edgellm/kernels/dense_matmul.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/elementwise.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/gemm_q8.hpp"
#include "edgellm/kernels/linear.hpp"
#include "edgellm/kernels/matmul.hpp"
#include "edgellm/kernels/q8_matrix.hpp"
#include "edgellm/kernels/quantize.hpp"
#include "edgellm/kernels/reference.hpp"
#include "edgellm/kernels/reference_attention.hpp"
