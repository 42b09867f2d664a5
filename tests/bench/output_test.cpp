// SPDX-License-Identifier: Apache-2.0
// bench/output.hpp: the text of every -o format for a small table, nulls and quoting included.
#include "../../bench/output.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace test_bench_output {

using namespace edgellm::bench;

namespace {
const std::vector<std::string> kColumns{"test", "tokens_per_s", "pct_roofline"};
const std::vector<field> kMeta{{"git_sha", "abc1234"}, {"hardware_threads", 2}};
const std::vector<value> kPp{"pp32", 812.5, null};
const std::vector<value> kOdd{"a,\"b\"\tc", 3, std::nan("")};

std::string table_text(output_format f, const std::vector<std::vector<value>>& rows) {
  std::string s = format_begin(f, kColumns, kMeta);
  for (std::size_t i = 0; i < rows.size(); ++i) s += format_row(f, kColumns, kMeta, rows[i], i);
  return s + format_end(f);
}
}  // namespace

TEST_CASE("bench output: tsv keeps metadata lines, null is empty", "[bench]") {
  REQUIRE(table_text(output_format::tsv, {kPp}) ==
          "# git_sha=abc1234\n# hardware_threads=2\n"
          "test\ttokens_per_s\tpct_roofline\npp32\t812.5\t\n");
  // A tab or newline inside a string would break the row: replaced by a space.
  REQUIRE(format_row(output_format::tsv, kColumns, kMeta, kOdd, 0) == "a,\"b\" c\t3\t\n");
}

TEST_CASE("bench output: json is one array, every row carries the metadata", "[bench]") {
  REQUIRE(table_text(output_format::json, {kPp, kOdd}) ==
          "[\n"
          "  {\"git_sha\": \"abc1234\", \"hardware_threads\": 2, \"test\": \"pp32\", "
          "\"tokens_per_s\": 812.5, \"pct_roofline\": null},\n"
          "  {\"git_sha\": \"abc1234\", \"hardware_threads\": 2, \"test\": \"a,\\\"b\\\"\\tc\", "
          "\"tokens_per_s\": 3, \"pct_roofline\": null}\n"
          "]\n");
  REQUIRE(table_text(output_format::json, {}) == "[\n]\n");  // no row: still valid JSON
}

TEST_CASE("bench output: jsonl is one object a line", "[bench]") {
  REQUIRE(table_text(output_format::jsonl, {kPp}) ==
          "{\"git_sha\": \"abc1234\", \"hardware_threads\": 2, \"test\": \"pp32\", "
          "\"tokens_per_s\": 812.5, \"pct_roofline\": null}\n");
}

TEST_CASE("bench output: csv quotes per RFC 4180, metadata columns first", "[bench]") {
  REQUIRE(table_text(output_format::csv, {kPp, kOdd}) ==
          "git_sha,hardware_threads,test,tokens_per_s,pct_roofline\n"
          "abc1234,2,pp32,812.5,\n"
          "abc1234,2,\"a,\"\"b\"\"\tc\",3,\n");
}

TEST_CASE("bench output: md puts - for null and keeps | out of cells", "[bench]") {
  const std::string md = table_text(output_format::md, {kPp, {"x|y", 1, 2.5}});
  REQUIRE(md ==
          "# git_sha=abc1234\n# hardware_threads=2\n\n"
          "| test | tokens_per_s | pct_roofline |\n| --- | --- | --- |\n"
          "| pp32 | 812.5 | - |\n| x/y | 1 | 2.5 |\n");
}

TEST_CASE("bench output: cells", "[bench]") {
  REQUIRE(value().is_null());
  REQUIRE(value(std::optional<double>()).is_null());
  REQUIRE(render_cell(std::optional<int>(4), output_format::json) == "4");
  REQUIRE(render_cell(INFINITY, output_format::json) == "null");
  REQUIRE(render_cell(0.0, output_format::csv) == "0");  // a real zero stays a zero
  REQUIRE(render_cell(1.0 / 3.0, output_format::tsv) == "0.333333");
  REQUIRE(render_cell(true, output_format::json) == "\"true\"");
}

}  // namespace test_bench_output
