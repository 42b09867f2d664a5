// SPDX-License-Identifier: Apache-2.0
// The packed-weight cache: written on the first load, mapped on the next, identical weights
// either way, and rebuilt (never trusted) when stale, truncated or corrupted.
#include "edgellm/model/packed_cache.hpp"

#include "edgellm/model/weights.hpp"
#include "model/model_test_support.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace test_model_packed_cache {

using Catch::Matchers::Contains;
using edgellm::model::LmHeadFormat;
using edgellm::model::load_weights;
using edgellm::model::LoadOptions;
using edgellm::model::TransformerWeights;

namespace {

// Every int4 matrix of a and b (and an int8 lm_head) holds the same bytes.
void require_same_int4(const TransformerWeights& a, const TransformerWeights& b) {
  REQUIRE(a.layers.size() == b.layers.size());
  std::size_t matrices = 0;
  const auto same = [&](const edgellm::model::Linear& x, const edgellm::model::Linear& y) {
    REQUIRE(x.quantized() == y.quantized());
    REQUIRE(x.int8() == y.int8());
    if (x.int8()) {
      REQUIRE(x.q8.byte_size() == y.q8.byte_size());
      REQUIRE(std::memcmp(x.q8.data(), y.q8.data(), x.q8.byte_size()) == 0);
      REQUIRE(x.q8.data() != y.q8.data());
      return;
    }
    if (!x.quantized()) return;
    REQUIRE(x.q4.byte_size() == y.q4.byte_size());
    REQUIRE(std::memcmp(x.q4.data(), y.q4.data(), x.q4.byte_size()) == 0);
    REQUIRE(x.bias == y.bias);
    ++matrices;
  };
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const auto &p = a.layers[i], &q = b.layers[i];
    same(p.q_proj, q.q_proj);
    same(p.k_proj, q.k_proj);
    same(p.v_proj, q.v_proj);
    same(p.o_proj, q.o_proj);
    same(p.gate_proj, q.gate_proj);
    same(p.up_proj, q.up_proj);
    same(p.down_proj, q.down_proj);
  }
  same(a.lm_head, b.lm_head);
  REQUIRE(matrices >= 7 * a.layers.size());
}

// A byte of `path` at `offset` flipped.
void flip_byte(const std::string& path, std::size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("packed cache: written once, then mapped; same weights", "[model]") {
  edgellm::test::TempDir tmp("edgellm-packed");
  for (const char* fixture : {"qwen2-awq-gemm", "llama-fp16"}) {
    for (LmHeadFormat head : {LmHeadFormat::as_stored, LmHeadFormat::q4, LmHeadFormat::int8}) {
      CAPTURE(fixture, edgellm::model::lm_head_format_name(head));
      // An int8 lm_head is copied out of the cache (Q8Matrix is owned memory).
      const std::string int8_note = head == LmHeadFormat::int8 ? ", the int8 lm_head copied" : "";
      const std::string dir = edgellm::test::model_fixture(fixture);
      LoadOptions plain_opts;
      plain_opts.lm_head = head;
      plain_opts.int4_arena_min_bytes = 0;  // converted, then gathered into the int4 arena
      auto plain = load_weights(dir, plain_opts);
      REQUIRE(plain);
      REQUIRE((*plain)->packed_cache_note.empty());

      LoadOptions o = plain_opts;
      o.packed_cache = tmp.file(std::string(fixture) + "-" +
                                std::string(edgellm::model::lm_head_format_name(head)) + ".bin");
      std::filesystem::remove(o.packed_cache);
      auto first = load_weights(dir, o);
      REQUIRE(first);
      REQUIRE_THAT((*first)->packed_cache_note, Contains("wrote " + o.packed_cache));
      REQUIRE_FALSE((*first)->packed_cache_file);
      require_same_int4(**plain, **first);

      auto second = load_weights(dir, o);
      REQUIRE(second);
      REQUIRE((*second)->packed_cache_note ==
              "int4 weights mapped from " + o.packed_cache + int8_note);
      REQUIRE((*second)->packed_cache_file);
      // Zero-copy: the matrices point into the mapping.
      const auto& file = *(*second)->packed_cache_file;
      const std::byte* q = (*second)->layers[0].q_proj.q4.data();
      REQUIRE(q >= file.data());
      REQUIRE(q < file.data() + file.size());
      require_same_int4(**plain, **second);

      // Copied: owned matrices, the same bytes, no mapping kept.
      LoadOptions c = o;
      c.packed_cache_copy = true;
      c.int4_arena_min_bytes = 0;  // gathered however small
      auto copied = load_weights(dir, c);
      REQUIRE(copied);
      REQUIRE((*copied)->packed_cache_note ==
              "int4 weights copied from " + o.packed_cache + int8_note);
      REQUIRE_FALSE((*copied)->packed_cache_file);
      // Owned by the weights: gathered into their int4 arena (weights_test.cpp).
      REQUIRE((*copied)->int4_arena.contains((*copied)->layers[0].q_proj.q4.data()));
      REQUIRE((*second)->int4_arena.empty());  // views of the mapping are left there
      require_same_int4(**plain, **copied);
      const auto& ph = (*plain)->lm_head.dense;
      const auto& ch = (*copied)->lm_head.dense;
      if (!(*plain)->lm_head.quantized()) {  // an unquantised lm_head is copied too
        REQUIRE(ch.owned_bytes() == ph.n() * ph.k() * ph.element_size());
        REQUIRE(std::memcmp(ch.data(), ph.data(), ch.owned_bytes()) == 0);
      }
    }
  }
}

TEST_CASE("packed cache: stale, truncated, corrupted or unwritable caches are rebuilt", "[model]") {
  edgellm::test::TempDir tmp("edgellm-packed-bad");
  const std::string dir = edgellm::test::copy_fixture("qwen2-awq-gemm", tmp);
  auto plain = load_weights(dir);
  REQUIRE(plain);
  LoadOptions o;
  o.packed_cache = "auto";
  const std::string path = edgellm::model::default_packed_cache_path(dir);
  REQUIRE(load_weights(dir, o));
  REQUIRE(std::filesystem::exists(path));

  SECTION("other load options") {
    LoadOptions q4 = o;
    q4.lm_head = LmHeadFormat::q4;
    auto w = load_weights(dir, q4);
    REQUIRE(w);
    REQUIRE_THAT((*w)->packed_cache_note, Contains("stale") && Contains("wrote"));
  }
  SECTION("a changed config.json") {
    edgellm::test::write_file(dir + "/config.json",
                              edgellm::test::read_file(dir + "/config.json") + "\n");
    auto w = load_weights(dir, o);
    REQUIRE(w);
    REQUIRE_THAT((*w)->packed_cache_note, Contains("stale"));
    require_same_int4(**plain, **w);
  }
  SECTION("truncated") {
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4096);
    auto w = load_weights(dir, o);
    REQUIRE(w);
    REQUIRE_THAT((*w)->packed_cache_note, Contains("truncated") && Contains("wrote"));
    require_same_int4(**plain, **w);
  }
  SECTION("a flipped bit in the tiles or in the header") {
    const bool header = GENERATE(false, true);
    flip_byte(path, header ? 60 : std::filesystem::file_size(path) - 5000);
    auto w = load_weights(dir, o);
    REQUIRE(w);
    REQUIRE_THAT((*w)->packed_cache_note, Contains("wrote"));
    if (header) REQUIRE_THAT((*w)->packed_cache_note, Contains("checksum"));
    require_same_int4(**plain, **w);
    auto again = load_weights(dir, o);  // the rebuilt cache is good
    REQUIRE(again);
    REQUIRE_THAT((*again)->packed_cache_note, Contains("mapped"));
  }
  SECTION("a flipped bit in the tiles, copying") {
    flip_byte(path, std::filesystem::file_size(path) - 5000);
    LoadOptions c = o;
    c.packed_cache_copy = true;
    auto w = load_weights(dir, c);
    REQUIRE(w);
    REQUIRE_THAT((*w)->packed_cache_note, Contains("wrote"));
    require_same_int4(**plain, **w);
  }
  SECTION("not a cache at all") {
    edgellm::test::write_file(path, "hello");
    auto w = load_weights(dir, o);
    REQUIRE(w);
    REQUIRE_THAT((*w)->packed_cache_note, Contains("not a packed cache"));
  }
  SECTION("an unwritable location only costs the cache") {
    LoadOptions bad = o;
    bad.packed_cache = tmp.file("no/such/dir/cache.bin");
    auto w = load_weights(dir, bad);
    REQUIRE(w);
    REQUIRE_THAT((*w)->packed_cache_note, Contains("cannot"));
    require_same_int4(**plain, **w);
  }
}

TEST_CASE("packed cache: an explicit path holding another file is left alone unless forced",
          "[model]") {
  edgellm::test::TempDir tmp("edgellm-packed-explicit");
  const std::string dir = edgellm::test::copy_fixture("qwen2-awq-gemm", tmp);
  auto plain = load_weights(dir);
  REQUIRE(plain);
  LoadOptions o;
  o.packed_cache = tmp.file("cache.bin");

  SECTION("any other file") {
    edgellm::test::write_file(o.packed_cache, "my thesis");
    auto w = load_weights(dir, o);
    REQUIRE(w);  // the weights load from the checkpoint
    REQUIRE_THAT((*w)->packed_cache_note,
                 Contains("exists and is not an edgellm packed cache") &&
                     Contains("not overwritten") && Contains("packed_cache_overwrite") &&
                     Contains("--force"));
    CHECK(edgellm::test::read_file(o.packed_cache) == "my thesis");
    require_same_int4(**plain, **w);
    LoadOptions force = o;
    force.packed_cache_overwrite = true;
    auto f = load_weights(dir, force);
    REQUIRE(f);
    REQUIRE_THAT((*f)->packed_cache_note, Contains("wrote"));
    auto mapped = load_weights(dir, o);
    REQUIRE(mapped);
    REQUIRE_THAT((*mapped)->packed_cache_note, Contains("mapped"));
  }
  SECTION("the packed cache of another model or other options") {
    LoadOptions q4 = o;
    q4.lm_head = LmHeadFormat::q4;
    REQUIRE(load_weights(dir, q4));
    const std::string before = edgellm::test::read_file(o.packed_cache);
    auto w = load_weights(dir, o);
    REQUIRE(w);
    REQUIRE_THAT((*w)->packed_cache_note,
                 Contains("belongs to another checkpoint, config or set of load options") &&
                     Contains("not overwritten"));
    CHECK(edgellm::test::read_file(o.packed_cache) == before);
  }
  SECTION("its own cache, damaged, is rebuilt without asking") {
    REQUIRE(load_weights(dir, o));
    std::filesystem::resize_file(o.packed_cache, std::filesystem::file_size(o.packed_cache) - 4096);
    auto w = load_weights(dir, o);
    REQUIRE(w);
    REQUIRE_THAT((*w)->packed_cache_note, Contains("truncated") && Contains("wrote"));
  }
  SECTION("a directory is never written through") {
    std::filesystem::create_directories(o.packed_cache);
    auto w = load_weights(dir, o);
    REQUIRE(w);
    REQUIRE_THAT((*w)->packed_cache_note, Contains("is a directory"));
    CHECK(std::filesystem::is_directory(o.packed_cache));
  }
  SECTION("a FIFO or a directory is never replaced, forced or not; no --force hint") {
    REQUIRE(::mkfifo(o.packed_cache.c_str(), 0600) == 0);
    std::filesystem::create_directories(tmp.file("dir.bin"));
    for (const std::string& path : {o.packed_cache, tmp.file("dir.bin")}) {
      for (const bool force : {false, true}) {
        INFO(path << " force " << force);
        LoadOptions f = o;
        f.packed_cache = path;
        f.packed_cache_overwrite = force;
        auto w = load_weights(dir, f);
        REQUIRE(w);
        REQUIRE_THAT((*w)->packed_cache_note, Contains("not a regular file; not written") &&
                                                  !Contains("--force") && !Contains("wrote"));
      }
    }
    struct stat st {};
    REQUIRE(::stat(o.packed_cache.c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    CHECK(std::filesystem::is_directory(tmp.file("dir.bin")));
  }
}

TEST_CASE("packed cache: a killed writer's temporary is removed by the next write", "[model]") {
  edgellm::test::TempDir tmp("edgellm-packed-stale");
  const std::string dir = edgellm::test::copy_fixture("qwen2-awq-gemm", tmp);
  LoadOptions o;
  o.packed_cache = tmp.file("cache.bin");
  const pid_t child = ::fork();  // exits at once: its pid is then no process's
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  const std::string stale = o.packed_cache + ".tmp." + std::to_string(child) + ".42.0";
  edgellm::test::write_file(stale, "EDGELLM Q4 PACK partial");
  auto w = load_weights(dir, o);
  REQUIRE(w);
  REQUIRE_THAT((*w)->packed_cache_note, Contains("wrote"));
  CHECK_FALSE(std::filesystem::exists(stale));
  std::size_t n = 0;  // files of the cache: itself only
  for (const auto& e : std::filesystem::directory_iterator(tmp.path()))
    n += e.path().filename().string().rfind("cache.bin", 0) == 0;
  CHECK(n == 1);
}

TEST_CASE("packed cache: two threads loading one checkpoint with `auto` both succeed",
          "[model]") {
  edgellm::test::TempDir tmp("edgellm-packed-race");
  const std::string dir = edgellm::test::copy_fixture("qwen2-awq-gemm", tmp);
  auto plain = load_weights(dir);
  REQUIRE(plain);
  LoadOptions o;
  o.packed_cache = "auto";
  for (int round = 0; round < 3; ++round) {
    std::filesystem::remove(edgellm::model::default_packed_cache_path(dir));
    edgellm::result<std::shared_ptr<const TransformerWeights>> a = edgellm::error{},
                                                               b = edgellm::error{};
    std::thread ta([&] { a = load_weights(dir, o); });
    std::thread tb([&] { b = load_weights(dir, o); });
    ta.join();
    tb.join();
    REQUIRE(a);
    REQUIRE(b);
    for (const auto* w : {&*a, &*b}) {
      INFO((*w)->packed_cache_note);
      CHECK_THAT((*w)->packed_cache_note, !Contains("space") && !Contains("cannot"));
      require_same_int4(**plain, **w);
    }
    std::size_t files = 0;  // the cache and the checkpoint's own files; no temporary left
    for (const auto& e : std::filesystem::directory_iterator(dir))
      files += e.path().filename().string().find(".tmp.") != std::string::npos;
    CHECK(files == 0);
    auto again = load_weights(dir, o);
    REQUIRE(again);
    CHECK_THAT((*again)->packed_cache_note, Contains("mapped"));
  }
}

}  // namespace test_model_packed_cache
