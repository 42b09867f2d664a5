// SPDX-License-Identifier: Apache-2.0
// Umbrella header: everything in edgellm, layer by layer (README "Architecture"). A program
// that only multiplies matrices includes edgellm/kernels.hpp instead and compiles far faster
// (no tokenizer, Unicode tables or JSON).
#pragma once

#include "edgellm/config.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include "edgellm/io/atomic_file.hpp"
#include "edgellm/io/checkpoint.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/io/meminfo.hpp"
#include "edgellm/io/output_path.hpp"
#include "edgellm/io/safetensors.hpp"

#include "edgellm/kernels.hpp"

#include "edgellm/cache/dense_kv_cache.hpp"
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/cache/prefix_blob.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"

#include "edgellm/backend/backend.hpp"
#include "edgellm/backend/cpu.hpp"
#include "edgellm/backend/scalar.hpp"

#include "edgellm/model/config.hpp"
#include "edgellm/model/config_json.hpp"
#include "edgellm/model/lm_head_format.hpp"
#include "edgellm/model/logits_mode.hpp"
#include "edgellm/model/packed_cache.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/model/weights.hpp"

#include "edgellm/decode/generate.hpp"
#include "edgellm/decode/lookup_draft.hpp"
#include "edgellm/decode/model.hpp"
#include "edgellm/decode/prompt_cache.hpp"
#include "edgellm/decode/sampler.hpp"
#include "edgellm/decode/speculative.hpp"
#include "edgellm/decode/speculative_cost.hpp"

#include "edgellm/plan.hpp"
#include "edgellm/session.hpp"
