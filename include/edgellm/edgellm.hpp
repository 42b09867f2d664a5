// SPDX-License-Identifier: Apache-2.0
// Umbrella header: everything in edgellm.
#pragma once

#include "edgellm/config.hpp"
#include "edgellm/kernels/awq.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/matmul.hpp"
#include "edgellm/kernels/quantize.hpp"
#include "edgellm/kernels/reference.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/decode/generate.hpp"
#include "edgellm/decode/model.hpp"
#include "edgellm/decode/sampler.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/io/safetensors.hpp"
#include "edgellm/model/config.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/model/weights.hpp"
