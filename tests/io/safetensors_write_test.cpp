// SPDX-License-Identifier: Apache-2.0
#include "edgellm/io/safetensors_write.hpp"

#include "edgellm/io/checkpoint.hpp"
#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <vector>

namespace test_io_safetensors_write {

using namespace edgellm;
using namespace edgellm::io;

TEST_CASE("SafetensorsWriter streams tensors that the reader reads back", "[safetensors_write]") {
  test::TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::vector<float> a = {1.0f, -2.5f, 3.0f, 4.0f, 5.0f, 6.0f};
  const std::vector<std::int32_t> b = {7, -8, 9};
  auto w = SafetensorsWriter::create(
      path, {{"layer.a", dtype::f32, {2, 3}}, {"b", dtype::i32, {3}}, {"empty", dtype::f16, {0}}});
  REQUIRE(w);
  CHECK(w->next()->name == "layer.a");
  // Out of order and of the wrong size are refused.
  CHECK_FALSE(w->write("b", std::as_bytes(std::span(b))));
  CHECK_FALSE(w->write("layer.a", std::as_bytes(std::span(b))));
  REQUIRE(w->write("layer.a", std::as_bytes(std::span(a))));
  REQUIRE(w->write("b", std::as_bytes(std::span(b))));
  CHECK_FALSE(std::filesystem::exists(path));  // not before commit
  REQUIRE(w->write("empty", {}));
  REQUIRE(w->commit());

  auto f = SafetensorsFile::open(path);
  REQUIRE(f);
  CHECK(f->header().data_offset() % 8 == 0);
  auto ta = f->tensor("layer.a");
  REQUIRE(ta);
  CHECK(ta->type() == dtype::f32);
  CHECK(ta->shape() == std::vector<std::size_t>{2, 3});
  std::vector<float> back(6);
  std::memcpy(back.data(), ta->bytes.data(), 24);
  CHECK(back == a);
  auto tb = f->tensor("b");
  REQUIRE(tb);
  std::vector<std::int32_t> bb(3);
  std::memcpy(bb.data(), tb->bytes.data(), 12);
  CHECK(bb == b);
  REQUIRE(f->header().metadata_value("format"));
  CHECK(*f->header().metadata_value("format") == "pt");
}

TEST_CASE("SafetensorsWriter discards a file with tensors missing", "[safetensors_write]") {
  test::TempDir dir;
  const std::string path = dir.file("m.safetensors");
  auto w = SafetensorsWriter::create(path, {{"a", dtype::f32, {1}}, {"b", dtype::f32, {1}}});
  REQUIRE(w);
  const float one = 1.0f;
  REQUIRE(w->write("a", std::as_bytes(std::span(&one, 1))));
  auto st = w->commit();
  REQUIRE_FALSE(st);
  CHECK_THAT(st.error().message, Catch::Contains("'b'"));
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()),
                      std::filesystem::directory_iterator()) == 0);
  // Duplicate names are refused up front.
  CHECK_FALSE(SafetensorsWriter::create(path, {{"a", dtype::f32, {1}}, {"a", dtype::f32, {1}}}));
}

}  // namespace test_io_safetensors_write
