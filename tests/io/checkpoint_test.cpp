// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/io/checkpoint.hpp: checkpoint directories with model.safetensors, a single file
// of another name, empty and missing directories, sharded checkpoints and the validation of their
// index.
#include "edgellm/io/checkpoint.hpp"

#include "support/safetensors_writer.hpp"
#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace test_io_checkpoint {

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using edgellm::errc;
using edgellm::io::dtype;
using edgellm::test::build_file;
using edgellm::test::bytes_of;
using edgellm::test::le64;
using edgellm::test::TempDir;

}  // namespace

TEST_CASE("Checkpoint opens a directory with model.safetensors", "[io]") {
  TempDir dir;
  dir.write("model.safetensors",
            build_file({{"a", "F32", {2}, bytes_of(8, 1)}, {"b", "F16", {2}, bytes_of(4, 2)}}));
  dir.write("config.json", "{}");
  auto c = edgellm::io::Checkpoint::open(dir.str());
  REQUIRE(c.has_value());
  CHECK(c->size() == 2);
  CHECK(c->files().size() == 1);
  CHECK(c->names() == std::vector<std::string>{"a", "b"});
  CHECK(c->total_bytes() == 12);
  CHECK(c->contains("a"));
  CHECK(c->info("b")->type == dtype::f16);
  auto a = c->find("a");
  REQUIRE(a.has_value());
  CHECK(std::memcmp(a->bytes.data(), bytes_of(8, 1).data(), 8) == 0);
  CHECK(c->file_of("a") == &c->files()[0]);

  auto m = c->find("lm_head.weight");
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().code == errc::out_of_range);
  CHECK_THAT(m.error().message, Contains("missing tensor 'lm_head.weight' in " + dir.str()));

  // A path to the file itself also works.
  auto single = edgellm::io::Checkpoint::open((dir.path() / "model.safetensors").string());
  REQUIRE(single.has_value());
  CHECK(single->size() == 2);
}

TEST_CASE("Checkpoint accepts a single *.safetensors of another name", "[io]") {
  TempDir dir;
  dir.write("weights.safetensors", build_file({{"x", "I32", {1}, bytes_of(4, 1)}}));
  auto c = edgellm::io::Checkpoint::open(dir.str());
  REQUIRE(c.has_value());
  CHECK(c->names() == std::vector<std::string>{"x"});

  dir.write("other.safetensors", build_file({{"y", "I32", {1}, bytes_of(4, 1)}}));
  auto two = edgellm::io::Checkpoint::open(dir.str());
  REQUIRE_FALSE(two.has_value());
  CHECK_THAT(two.error().message,
             Contains("2 *.safetensors files (other.safetensors, weights.safetensors)"));
  CHECK_THAT(two.error().message, Contains("no model.safetensors.index.json in " + dir.str()));
}

TEST_CASE("Checkpoint reports empty and missing directories", "[io]") {
  TempDir dir;
  auto empty = edgellm::io::Checkpoint::open(dir.str());
  REQUIRE_FALSE(empty.has_value());
  CHECK_THAT(empty.error().message,
             Contains("no model.safetensors, model.safetensors.index.json or other *.safetensors "
                      "file in " +
                      dir.str()));
  const std::string missing = (dir.path() / "nothing").string();
  auto m = edgellm::io::Checkpoint::open(missing);
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().code == errc::io_error);
  CHECK_THAT(m.error().message, Contains(missing));
  // A corrupt model.safetensors names that file.
  dir.write("model.safetensors", le64(4) + "{}");
  auto bad = edgellm::io::Checkpoint::open(dir.str());
  REQUIRE_FALSE(bad.has_value());
  CHECK_THAT(bad.error().message, Contains("model.safetensors"));
}

namespace {

/// Writes a two-shard checkpoint: shard 1 has a, b; shard 2 has c. Returns the index text.
void write_shards(const TempDir& dir) {
  dir.write("model-00001-of-00002.safetensors",
            build_file({{"a", "F32", {2}, bytes_of(8, 1)}, {"b", "F16", {1}, bytes_of(2, 2)}}));
  dir.write("model-00002-of-00002.safetensors", build_file({{"c", "I32", {3}, bytes_of(12, 3)}}));
}

const char* kIndex = R"({
  "metadata": {"total_size": 22, "format": "pt"},
  "weight_map": {
    "a": "model-00001-of-00002.safetensors",
    "c": "model-00002-of-00002.safetensors",
    "b": "model-00001-of-00002.safetensors"
  }
})";

}  // namespace

TEST_CASE("Checkpoint opens a sharded checkpoint", "[io]") {
  TempDir dir;
  write_shards(dir);
  dir.write("model.safetensors.index.json", kIndex);
  auto c = edgellm::io::Checkpoint::open(dir.str());
  REQUIRE(c.has_value());
  CHECK(c->path() == dir.str());
  CHECK(c->files().size() == 2);
  CHECK(c->size() == 3);
  CHECK(c->names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(c->total_bytes() == 22);
  auto cv = c->find("c");
  REQUIRE(cv.has_value());
  CHECK(cv->type() == dtype::i32);
  CHECK(std::memcmp(cv->bytes.data(), bytes_of(12, 3).data(), 12) == 0);
  CHECK_THAT(c->file_of("c")->path(), Contains("model-00002-of-00002.safetensors"));
  CHECK_THAT(c->file_of("b")->path(), Contains("model-00001-of-00002.safetensors"));
  CHECK_FALSE(c->find("d").has_value());

  // Moving the checkpoint keeps lookups working.
  edgellm::io::Checkpoint moved = std::move(*c);
  CHECK(moved.find("a").has_value());
  CHECK(moved.info("b")->nbytes == 2);
}

TEST_CASE("Checkpoint validates the shard index", "[io]") {
  TempDir dir;
  write_shards(dir);
  const std::string index_path = (dir.path() / "model.safetensors.index.json").string();
  const auto open_with = [&](const std::string& index) {
    dir.write("model.safetensors.index.json", index);
    auto c = edgellm::io::Checkpoint::open(dir.str());
    if (c) FAIL("expected an error for index " << index);
    return c.error().message;
  };

  // A shard that does not exist.
  std::string m = open_with(
      R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "z": "model-00009-of-00009.safetensors"}})");
  CHECK_THAT(m, Contains(index_path));
  CHECK_THAT(
      m, Contains("shard 'model-00009-of-00009.safetensors' named in weight_map does not exist"));

  // A tensor that is not in the shard the index names.
  m = open_with(R"({"weight_map": {"a": "model-00002-of-00002.safetensors",
                                   "c": "model-00002-of-00002.safetensors"}})");
  CHECK_THAT(m, Contains("weight_map puts tensor 'a' in shard 'model-00002-of-00002.safetensors', "
                         "which does not contain it"));

  // A tensor stored in two shards.
  dir.write("model-00003-of-00003.safetensors", build_file({{"a", "F32", {2}, bytes_of(8, 1)}}));
  m = open_with(R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                   "c": "model-00003-of-00003.safetensors"}})");
  CHECK_THAT(m, Contains("tensor 'a' is stored in two shards, 'model-00001-of-00002.safetensors' "
                         "and 'model-00003-of-00003.safetensors'"));
  fs::remove(dir.path() / "model-00003-of-00003.safetensors");

  // Paths outside the directory are refused.
  m = open_with(R"({"weight_map": {"a": "../model-00001-of-00002.safetensors"}})");
  CHECK_THAT(m, Contains("tensor 'a' names \"../model-00001-of-00002.safetensors\", which is not a "
                         "plain file name"));
  CHECK_THAT(open_with(R"({"weight_map": {"a": "/etc/passwd"}})"),
             Contains("not a plain file name"));
  CHECK_THAT(open_with(R"({"weight_map": {"a": ".."}})"), Contains("not a plain file name"));
  CHECK_THAT(open_with(R"({"weight_map": {"a": ""}})"), Contains("not a plain file name"));

  // Structural problems.
  CHECK_THAT(open_with(R"({"metadata": {}})"), Contains(index_path + ": missing \"weight_map\""));
  CHECK_THAT(open_with(R"({"weight_map": []})"), Contains("\"weight_map\" must be an object"));
  CHECK_THAT(open_with(R"({"weight_map": {}})"), Contains("\"weight_map\" is empty"));
  CHECK_THAT(open_with(R"({"weight_map": {"a": 1}})"),
             Contains("weight_map entry for tensor 'a' must be a file name string, not 1"));
  CHECK_THAT(open_with("[]"), Contains(index_path + ": must be a JSON object"));
  m = open_with(R"({"weight_map": {"a": "x", "a": "y"}})");
  CHECK_THAT(m, Contains(index_path));
  CHECK_THAT(m, Contains("duplicate key \"a\""));
  m = open_with("{\"weight_map\": ");
  CHECK_THAT(m, Contains(index_path + ": at byte 15"));

  // A corrupt shard is named.
  dir.write("model-00002-of-00002.safetensors", le64(3) + "{}");
  m = open_with(kIndex);
  CHECK_THAT(m, Contains("model-00002-of-00002.safetensors"));
  CHECK_THAT(m, Contains("header length 3 runs past the end"));
}

TEST_CASE("Checkpoint ignores shard tensors that the index does not name", "[io]") {
  TempDir dir;
  write_shards(dir);
  dir.write("model.safetensors.index.json",
            R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                               "c": "model-00002-of-00002.safetensors"}})");
  auto c = edgellm::io::Checkpoint::open(dir.str());
  REQUIRE(c.has_value());
  CHECK(c->names() == std::vector<std::string>{"a", "c"});
  CHECK_FALSE(c->contains("b"));
}

}  // namespace test_io_checkpoint
