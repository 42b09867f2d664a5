// SPDX-License-Identifier: Apache-2.0
// The names most test files spell, in one place instead of a using-block per file: the result
// vocabulary (errc, status), ThreadPool, Catch's Contains matcher, the test helpers (namespace
// `test`, TempDir) and the aliases fs and json. Test files only: it puts names in the global
// namespace. Folder-specific names (kernels, cache, model, decode) stay in each file.
#pragma once

#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"
#include "support/temp_dir.hpp"
#include "support/test_util.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

namespace edgellm::io::json {}  // declared here so that the alias below needs no JSON header

namespace fs = std::filesystem;
namespace json = edgellm::io::json;
namespace test = edgellm::test;

using Catch::Matchers::Contains;
using edgellm::errc;
using edgellm::status;
using edgellm::ThreadPool;
using edgellm::test::TempDir;
