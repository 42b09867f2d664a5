// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/io/safetensors.hpp: header validation (every check of docs/formats.md §2),
// the dtype table, SafetensorsFile and its tensor views.
#include "edgellm/io/safetensors.hpp"

#include "support/safetensors_writer.hpp"
#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace test_io_safetensors {

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using edgellm::errc;
using edgellm::io::dtype;

using edgellm::test::build_file;
using edgellm::test::bytes_of;
using edgellm::test::le64;
using edgellm::test::raw_file;
using edgellm::test::TempDir;
using T = edgellm::test::TensorSpec;

std::span<const std::byte> span_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

/// Parses `file` and returns the error message, failing the test if it parsed.
std::string header_error(const std::string& file, errc code = errc::format_error) {
  auto h = edgellm::io::parse_safetensors_header(span_of(file), "bad.safetensors");
  if (h) FAIL("expected an error");
  CHECK(h.error().code == code);
  CHECK_THAT(h.error().message, Contains("bad.safetensors"));
  return h.error().message;
}

/// A one-tensor header {"t": {dtype, shape, data_offsets}} with `data` bytes after it.
std::string one_tensor(const std::string& fields, const std::string& data) {
  return raw_file("{\"t\":{" + fields + "}}", data);
}

}  // namespace

TEST_CASE("safetensors dtype table", "[io]") {
  using edgellm::io::dtype_bits;
  using edgellm::io::dtype_name;
  using edgellm::io::dtype_size;
  using edgellm::io::parse_dtype;
  CHECK(dtype_size(dtype::f32) == 4);
  CHECK(dtype_size(dtype::f16) == 2);
  CHECK(dtype_size(dtype::bf16) == 2);
  CHECK(dtype_size(dtype::i32) == 4);
  CHECK(dtype_size(dtype::i8) == 1);
  CHECK(dtype_size(dtype::u8) == 1);
  CHECK(dtype_size(dtype::bool_) == 1);
  CHECK(dtype_size(dtype::i64) == 8);
  CHECK(dtype_size(dtype::f64) == 8);
  CHECK(dtype_size(dtype::c64) == 8);
  CHECK(dtype_size(dtype::f8_e4m3) == 1);
  CHECK(dtype_size(dtype::f4) == 0);
  CHECK(dtype_bits(dtype::f4) == 4);
  CHECK(dtype_bits(dtype::f6_e2m3) == 6);
  CHECK(dtype_name(dtype::bf16) == "BF16");
  CHECK(dtype_name(dtype::f8_e4m3fnuz) == "F8_E4M3FNUZ");
  static_assert(parse_dtype("F16") == dtype::f16);
  CHECK_FALSE(parse_dtype("f16").has_value());  // case-sensitive, like the format
  CHECK_FALSE(parse_dtype("F128").has_value());
  for (const auto& e : edgellm::io::detail::kDtypes) {
    CHECK(parse_dtype(e.name) == e.type);
    CHECK(dtype_name(e.type) == e.name);
  }
}

TEST_CASE("safetensors parses a valid header", "[io]") {
  const std::vector<T> ts = {
      {"model.embed_tokens.weight", "F32", {2, 3}, bytes_of(24, 1)},
      {"b16", "BF16", {}, bytes_of(2, 2)},  // scalar
      {"empty", "U8", {0, 5}, ""},          // zero-sized
      {"q.qweight", "I32", {2, 2}, bytes_of(16, 3)},
      {"h", "F16", {4}, bytes_of(8, 4)},
      {"f4", "F4", {6}, bytes_of(3, 5)},  // 6 × 4 bits = 3 bytes
  };
  const std::string file = build_file(ts);
  auto h = edgellm::io::parse_safetensors_header(span_of(file), "ok.safetensors");
  REQUIRE(h.has_value());
  CHECK(h->header_size() % 8 == 0);
  CHECK(h->data_offset() == 8 + h->header_size());
  CHECK(h->data_size() == 24 + 2 + 16 + 8 + 3);
  CHECK(h->total_bytes() == h->data_size());
  CHECK(h->data_offset() + h->data_size() == file.size());
  REQUIRE(h->tensors().size() == ts.size());
  REQUIRE(h->metadata().size() == 1);
  CHECK(*h->metadata_value("format") == "pt");
  CHECK(h->metadata_value("other") == nullptr);

  // tensors() is in file order (by offset); zero-sized "empty" sits at offset 26 with "b16" ahead.
  std::size_t prev_end = h->data_offset();
  for (const auto& t : h->tensors()) {
    CHECK(t.offset == prev_end);
    prev_end = t.offset + t.nbytes;
  }
  const auto* e = h->find("model.embed_tokens.weight");
  REQUIRE(e != nullptr);
  CHECK(e->type == dtype::f32);
  CHECK(e->shape == std::vector<std::size_t>{2, 3});
  CHECK(e->numel() == 6);
  CHECK(e->nbytes == 24);
  CHECK(e->offset == h->data_offset());
  CHECK(std::memcmp(file.data() + e->offset, ts[0].data.data(), 24) == 0);

  const auto* s = h->find("b16");
  REQUIRE(s != nullptr);
  CHECK(s->shape.empty());
  CHECK(s->numel() == 1);
  CHECK(s->nbytes == 2);

  const auto* z = h->find("empty");
  REQUIRE(z != nullptr);
  CHECK(z->numel() == 0);
  CHECK(z->nbytes == 0);

  const auto* f4 = h->find("f4");
  REQUIRE(f4 != nullptr);
  CHECK(f4->nbytes == 3);
  CHECK(h->find("missing") == nullptr);
  CHECK(h->find("") == nullptr);
}

TEST_CASE("safetensors accepts any member order, padding and no metadata", "[io]") {
  // Reverse order in the JSON relative to the data; no __metadata__; padded with spaces.
  const std::string header =
      R"({"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}     )";
  const std::string file = raw_file(header, bytes_of(8, 9));
  auto h = edgellm::io::parse_safetensors_header(span_of(file), "x");
  REQUIRE(h.has_value());
  CHECK(h->metadata().empty());
  CHECK(h->tensors()[0].name == "a");
  CHECK(h->tensors()[1].name == "b");

  // Unknown keys inside a tensor entry are ignored, as the reference reader does.
  const std::string extra = raw_file(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"note":"x"}})", bytes_of(4, 1));
  CHECK(edgellm::io::parse_safetensors_header(span_of(extra), "x").has_value());

  // No tensors at all and no data: valid.
  CHECK(edgellm::io::parse_safetensors_header(span_of(raw_file("{}")), "x").has_value());
  CHECK(edgellm::io::parse_safetensors_header(span_of(raw_file(R"({"__metadata__":{}}  )")), "x")
            .has_value());
}

TEST_CASE("safetensors rejects bad lengths and headers", "[io]") {
  CHECK_THAT(header_error(""), Contains("file is 0 bytes, too short for the 8-byte header length"));
  CHECK_THAT(header_error("1234567"), Contains("file is 7 bytes"));
  CHECK_THAT(header_error(le64(100'000'001) + "{}"),
             Contains("header length 100000001 exceeds the limit of 100000000 bytes"));
  CHECK_THAT(header_error(le64(~std::uint64_t{0})), Contains("exceeds the limit"));
  CHECK_THAT(header_error(le64(100) + "{}"),
             Contains("header length 100 runs past the end of the file (10 bytes)"));
  CHECK_THAT(header_error(le64(0)), Contains("header does not start with '{'"));
  CHECK_THAT(header_error(raw_file(" {}")), Contains("header does not start with '{'"));
  CHECK_THAT(header_error(raw_file("[]")), Contains("header does not start with '{'"));
  // JSON errors name the file and say the offset is within the header.
  const std::string json_err = header_error(raw_file("{\"a\":}"));
  CHECK_THAT(json_err, Contains("bad.safetensors (header): at byte 5"));
  // Padding must be whitespace; NUL padding is not JSON.
  CHECK_THAT(header_error(raw_file(std::string("{}\0\0", 4))), Contains("expected end of input"));
  // Invalid UTF-8 in a tensor name.
  CHECK_THAT(header_error(raw_file("{\"\xC3\x28\":{}}")), Contains("invalid UTF-8"));
  // Duplicate tensor names are named.
  CHECK_THAT(
      header_error(raw_file(
          R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
          "ab")),
      Contains("duplicate key \"w\""));
}

TEST_CASE("safetensors validates __metadata__", "[io]") {
  CHECK_THAT(header_error(raw_file(R"({"__metadata__":[1]})")),
             Contains("__metadata__ must be an object mapping strings to strings"));
  CHECK_THAT(header_error(raw_file(R"({"__metadata__":{"format":"pt","n":3}})")),
             Contains("__metadata__ value of \"n\" must be a string, not 3"));
}

TEST_CASE("safetensors validates each tensor entry and names it", "[io]") {
  const std::string d4 = bytes_of(4, 0);
  CHECK_THAT(header_error(raw_file(R"({"t":[1]})")),
             Contains("tensor 't': entry must be an object"));
  CHECK_THAT(header_error(one_tensor(R"("shape":[1],"data_offsets":[0,4])", d4)),
             Contains("tensor 't': missing \"dtype\""));
  CHECK_THAT(header_error(one_tensor(R"("dtype":4,"shape":[1],"data_offsets":[0,4])", d4)),
             Contains("tensor 't': \"dtype\" must be a string, not 4"));
  const std::string unknown = header_error(
      one_tensor(R"("dtype":"F128","shape":[1],"data_offsets":[0,4])", d4), errc::unsupported);
  CHECK_THAT(unknown, Contains("tensor 't': unknown dtype \"F128\""));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F32","data_offsets":[0,4])", d4)),
             Contains("tensor 't': missing \"shape\""));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F32","shape":4,"data_offsets":[0,4])", d4)),
             Contains("tensor 't': \"shape\" must be an array, not 4"));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F32","shape":[-1],"data_offsets":[0,4])", d4)),
             Contains("tensor 't': shape entries must be non-negative integers, found -1"));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F32","shape":[1.0],"data_offsets":[0,4])", d4)),
             Contains("found 1.0"));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F32","shape":["1"],"data_offsets":[0,4])", d4)),
             Contains("found \"1\""));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F32","shape":[1])", d4)),
             Contains("tensor 't': missing \"data_offsets\""));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[0])", d4)),
             Contains("tensor 't': \"data_offsets\" must be an array [begin, end], not an array of "
                      "1 elements"));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[0,4,8])", d4)),
             Contains("must be an array [begin, end]"));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[-4,0])", d4)),
             Contains("tensor 't': \"data_offsets\" must hold non-negative integers, not [-4,0]"));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[0,1e1])", d4)),
             Contains("must hold non-negative integers"));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F32","shape":[0],"data_offsets":[4,0])", d4)),
             Contains("tensor 't': data_offsets [4, 0] end before begin"));
}

TEST_CASE("safetensors checks sizes against shapes with overflow checks", "[io]") {
  CHECK_THAT(
      header_error(one_tensor(R"("dtype":"F32","shape":[2],"data_offsets":[0,4])", bytes_of(4, 0))),
      Contains("tensor 't': shape [2] of F32 needs 8 bytes but data_offsets [0, 4] span 4"));
  CHECK_THAT(header_error(
                 one_tensor(R"("dtype":"F16","shape":[3,1],"data_offsets":[0,8])", bytes_of(8, 0))),
             Contains("shape [3, 1] of F16 needs 6 bytes"));
  // numel overflows size_t.
  CHECK_THAT(
      header_error(
          one_tensor(R"("dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0])", "")),
      Contains("tensor 't': shape [4294967296, 4294967296] of U8 overflows the size computation"));
  // numel fits but numel × bits does not.
  CHECK_THAT(header_error(one_tensor(
                 R"("dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0])", "")),
             Contains("overflows the size computation"));
  // A zero dimension makes any other dimension harmless.
  CHECK(edgellm::io::parse_safetensors_header(
            span_of(one_tensor(
                R"("dtype":"F32","shape":[0,9223372036854775807],"data_offsets":[0,0])", "")),
            "x")
            .has_value());
  // Sub-byte types must fill whole bytes.
  CHECK_THAT(
      header_error(one_tensor(R"("dtype":"F4","shape":[3],"data_offsets":[0,2])", bytes_of(2, 0))),
      Contains("tensor 't': 3 elements of F4 are not a whole number of bytes"));
  CHECK_THAT(header_error(one_tensor(R"("dtype":"F6_E2M3","shape":[5],"data_offsets":[0,4])",
                                     bytes_of(4, 0))),
             Contains("5 elements of F6_E2M3"));
  CHECK(edgellm::io::parse_safetensors_header(
            span_of(one_tensor(R"("dtype":"F6_E3M2","shape":[4],"data_offsets":[0,3])",
                               bytes_of(3, 0))),
            "x")
            .has_value());
}

TEST_CASE("safetensors requires the tensors to tile the data buffer", "[io]") {
  const auto two = [](const std::string& a_off, const std::string& b_off, std::size_t data) {
    return raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":)" + a_off +
                        R"(},"b":{"dtype":"F32","shape":[1],"data_offsets":)" + b_off + "}}",
                    bytes_of(data, 0));
  };
  CHECK(edgellm::io::parse_safetensors_header(span_of(two("[0,4]", "[4,8]", 8)), "x"));

  // Out of range: end past the data buffer (a truncated file).
  CHECK_THAT(
      header_error(two("[0,4]", "[4,8]", 6)),
      Contains("tensor 'b': data_offsets [4, 8] run past the end of the 6-byte data buffer"));
  CHECK_THAT(header_error(two("[0,4]", "[18446744073709551611,18446744073709551615]", 8)),
             Contains("must hold non-negative integers"));  // beyond int64
  CHECK_THAT(
      header_error(two("[0,4]", "[9223372036854775803,9223372036854775807]", 8)),
      Contains(
          "tensor 'b': data_offsets [9223372036854775803, 9223372036854775807] run past the end"));
  // Overlap.
  CHECK_THAT(
      header_error(two("[0,4]", "[2,6]", 6)),
      Contains("tensor 'b': begins at data offset 2, overlapping tensor 'a', which ends at 4"));
  CHECK_THAT(header_error(two("[0,4]", "[0,4]", 4)), Contains("overlapping tensor"));
  // Hole between tensors.
  CHECK_THAT(header_error(two("[0,4]", "[6,10]", 10)),
             Contains("tensor 'b': begins at data offset 6 but the previous tensor 'a' ends at 4: "
                      "a hole of 2 bytes"));
  // Hole at the start.
  CHECK_THAT(header_error(two("[2,6]", "[6,10]", 10)),
             Contains("tensor 'a': the first tensor begins at data offset 2"));
  // Trailing bytes that belong to no tensor.
  CHECK_THAT(
      header_error(two("[0,4]", "[4,8]", 9)),
      Contains("tensors end at data offset 8 but the data buffer holds 9 bytes: 1 trailing"));
  CHECK_THAT(header_error(raw_file("{}", "x")), Contains("tensors end at data offset 0"));
  // A zero-sized tensor inside another tensor's range overlaps it.
  CHECK_THAT(
      header_error(raw_file(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
          bytes_of(8, 0))),
      Contains("overlapping tensor"));
}

TEST_CASE("safetensors rejects every truncation of a valid file", "[io]") {
  const std::string file =
      build_file({{"a", "F32", {3}, bytes_of(12, 1)}, {"b", "I32", {2, 2}, bytes_of(16, 2)}});
  for (std::size_t len = 0; len < file.size(); ++len) {
    INFO("truncated to " << len << " bytes");
    auto h = edgellm::io::parse_safetensors_header(span_of(file.substr(0, len)), "cut.safetensors");
    REQUIRE_FALSE(h.has_value());
    CHECK_THAT(h.error().message, Contains("cut.safetensors"));
  }
  // Appending a byte is also an error.
  CHECK_FALSE(edgellm::io::parse_safetensors_header(span_of(file + "x"), "x").has_value());
}

TEST_CASE("SafetensorsFile maps a file and gives tensor views", "[io]") {
  TempDir dir;
  const std::vector<T> ts = {{"w", "F32", {2, 2}, bytes_of(16, 7)},
                             {"h", "F16", {3}, bytes_of(6, 8)},
                             {"i", "I8", {2}, bytes_of(2, 9)}};
  const std::string path = dir.write("m.safetensors", build_file(ts));
  auto f = edgellm::io::SafetensorsFile::open(path);
  REQUIRE(f.has_value());
  CHECK(f->path() == path);
  CHECK(f->tensors().size() == 3);
  CHECK(f->mapping().size() == fs::file_size(path));

  auto w = f->tensor("w");
  REQUIRE(w.has_value());
  CHECK(w->name() == "w");
  CHECK(w->type() == dtype::f32);
  CHECK(w->shape() == std::vector<std::size_t>{2, 2});
  CHECK(w->numel() == 4);
  REQUIRE(w->bytes.size() == 16);
  CHECK(std::memcmp(w->bytes.data(), ts[0].data.data(), 16) == 0);
  CHECK(w->is_aligned());  // header padded to 8, F32 first

  auto h = f->tensor("h");
  REQUIRE(h.has_value());
  CHECK(std::memcmp(h->bytes.data(), ts[1].data.data(), 6) == 0);

  auto missing = f->tensor("nope");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().code == errc::out_of_range);
  CHECK_THAT(missing.error().message, Contains("missing tensor 'nope' in " + path));

  // Moving the file keeps views valid (the mapping does not move).
  const std::byte* before = w->bytes.data();
  edgellm::io::SafetensorsFile moved = std::move(*f);
  auto w2 = moved.tensor("w");
  REQUIRE(w2.has_value());
  CHECK(w2->bytes.data() == before);

  auto bad = edgellm::io::SafetensorsFile::open((dir.path() / "absent.safetensors").string());
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code == errc::io_error);
  CHECK_THAT(bad.error().message, Contains("absent.safetensors"));

  const std::string corrupt = dir.write("c.safetensors", le64(50) + "{}");
  auto c = edgellm::io::SafetensorsFile::open(corrupt);
  REQUIRE_FALSE(c.has_value());
  CHECK_THAT(c.error().message, Contains(corrupt));
}

TEST_CASE("TensorView::is_aligned detects unaligned tensors from old writers", "[io]") {
  TempDir dir;
  // Unpadded header: a 4-byte tensor then an F32 tensor at an odd absolute offset.
  const std::string file =
      build_file({{"a", "U8", {3}, bytes_of(3, 1)}, {"w", "F32", {2}, bytes_of(8, 2)}},
                 /*pad8=*/false);
  const std::string path = dir.write("u.safetensors", file);
  auto f = edgellm::io::SafetensorsFile::open(path);
  REQUIRE(f.has_value());
  const auto* w = f->find("w");
  REQUIRE(w != nullptr);
  const bool offset_aligned = w->offset % 4 == 0;
  CHECK(f->view(*w).is_aligned() == offset_aligned);
  CHECK(f->tensor("a")->is_aligned());  // 1-byte elements are always aligned
  // The header length decides; make sure this test really covers the unaligned case.
  CHECK_FALSE(offset_aligned);
}

}  // namespace test_io_safetensors
