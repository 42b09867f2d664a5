// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: packed-weight cache files (model::detail::PackedCacheReader, then
// load_weights with the cache and one forward step), checked against a tiny checkpoint: a copy of
// tests/data/model/llama-awq-gemm on tmpfs whose own packed cache, written once at start, gives
// the source key and the matrices (name, n, k, group) a valid cache holds.
// Input: byte 0 = options, the rest = the cache file. Options rewrite fields so that mutations
// reach what lies behind them: bit 0 the source key, bit 1 the file size, bit 2 each in-bounds
// entry's tile checksum, bit 3 the header checksum (last); bit 4 loads with packed_cache_copy.
// Properties: open() errors name the file; take() of an accepted cache gives a matrix of the
// asked shape or nothing; load_weights with any cache file loads (a bad cache is rebuilt, never
// an error) and the model runs one token.
// Seeds (EDGELLM_FUZZ_WRITE_SEEDS=DIR): the valid cache with all fields rewritten, and pieces.
#include "edgellm/detail/bytes.hpp"
#include "edgellm/model/packed_cache.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/model/weights.hpp"
#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace pc = edgellm::model::detail;

struct Matrix {
  std::string name;
  std::uint64_t n, k, group;
};

struct Reference {
  std::uint64_t key = 0;
  std::vector<Matrix> matrices;
  std::string bytes;  // the valid cache file
};

const edgellm::fuzz::ScratchDir& dir() {
  static const edgellm::fuzz::ScratchDir d("packed-cache");
  return d;
}

std::uint64_t u64(const std::string& s, std::size_t off) {
  return edgellm::detail::load_le64(reinterpret_cast<const std::byte*>(s.data()) + off);
}
void put64(std::string& s, std::size_t off, std::uint64_t v) {
  edgellm::detail::store_le64(reinterpret_cast<std::byte*>(s.data()) + off, v);
}

const Reference& reference() {
  static const Reference r = [] {
    namespace fs = std::filesystem;
    const fs::path src = edgellm::fuzz::data_path("model/llama-awq-gemm");
    for (const char* f : {"config.json", "model.safetensors"}) {
      std::error_code ec;
      fs::copy_file(src / f, dir().path() / f, fs::copy_options::overwrite_existing, ec);
      EDGELLM_FUZZ_CHECK(!ec);
    }
    edgellm::model::LoadOptions o;
    o.packed_cache = dir().file("reference.bin");
    auto w = edgellm::model::load_weights(dir().path().string(), o);
    EDGELLM_FUZZ_CHECK(w.has_value());
    Reference ref;
    ref.bytes = edgellm::fuzz::read_file(o.packed_cache);
    EDGELLM_FUZZ_CHECK(ref.bytes.size() >= pc::kPackedHeaderBytes);
    ref.key = u64(ref.bytes, 24);
    for (std::uint64_t i = 0; i < u64(ref.bytes, 32); ++i) {
      const std::size_t e = pc::kPackedHeaderBytes + i * pc::kPackedEntryBytes;
      const std::size_t o8 = e + pc::kPackedNameBytes;
      ref.matrices.push_back(Matrix{std::string(ref.bytes.c_str() + e), u64(ref.bytes, o8),
                                    u64(ref.bytes, o8 + 8), u64(ref.bytes, o8 + 16)});
    }
    EDGELLM_FUZZ_CHECK(!ref.matrices.empty());
    return ref;
  }();
  return r;
}

void repair(std::string& f, unsigned flags) {
  if (f.size() < pc::kPackedHeaderBytes) return;
  if (flags & 1) put64(f, 24, reference().key);
  if (flags & 2) put64(f, 40, f.size());
  const std::uint64_t count = u64(f, 32);
  if (count > (f.size() - pc::kPackedHeaderBytes) / pc::kPackedEntryBytes) return;
  if (flags & 4) {
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::size_t o = pc::kPackedHeaderBytes + i * pc::kPackedEntryBytes + pc::kPackedNameBytes;
      const std::uint64_t off = u64(f, o + 24), bytes = u64(f, o + 32);
      if (off > f.size() || bytes > f.size() - off) continue;
      put64(f, o + 40,
            edgellm::detail::lane_checksum64(
                {reinterpret_cast<const std::byte*>(f.data()) + off, bytes}));
    }
  }
  if (flags & 8) {
    std::string head = f.substr(0, pc::kPackedHeaderBytes + count * pc::kPackedEntryBytes);
    put64(head, 48, 0);
    put64(f, 48,
          edgellm::detail::lane_checksum64(
              {reinterpret_cast<const std::byte*>(head.data()), head.size()}));
  }
}

void write_seeds(const std::string& out) {
  const std::string& v = reference().bytes;
  edgellm::fuzz::write_seed(out, "valid", std::string(1, char(15)) + v);
  // Header and table only (tiles cut off), and the header alone.
  const std::size_t table = pc::kPackedHeaderBytes + reference().matrices.size() * pc::kPackedEntryBytes;
  edgellm::fuzz::write_seed(out, "table", std::string(1, char(15)) + v.substr(0, table));
  edgellm::fuzz::write_seed(out, "header", std::string(1, char(0)) + v.substr(0, pc::kPackedHeaderBytes));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)reference();
  if (const std::string out = edgellm::fuzz::seed_dir(); !out.empty()) {
    write_seeds(out);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  repair(file, data[0]);
  const std::string path = dir().file("fuzz.bin");
  edgellm::fuzz::write_file(path, file);

  auto r = pc::PackedCacheReader::open(path, reference().key);
  if (!r) {
    EDGELLM_FUZZ_CHECK(r.error().message.find(path) != std::string::npos);
    return 0;
  }
  for (const Matrix& m : reference().matrices) {
    for (const bool copy : {false, true}) {
      auto q = r->take(m.name, m.n, m.k, m.group, copy);
      if (q) EDGELLM_FUZZ_CHECK(q->n() == m.n && q->k() == m.k && q->group_size() == m.group);
    }
  }

  edgellm::model::LoadOptions o;
  o.packed_cache = path;
  o.packed_cache_copy = (data[0] & 16) != 0;
  auto w = edgellm::model::load_weights(dir().path().string(), o);
  EDGELLM_FUZZ_CHECK(w.has_value());
  auto t = edgellm::model::Transformer<>::create(*w, {.context_size = 4});
  EDGELLM_FUZZ_CHECK(t.has_value());
  std::vector<float> logits((*w)->config.vocab_size);
  const std::int32_t token = 1;
  EDGELLM_FUZZ_CHECK(t->forward({&token, 1}, edgellm::model::LogitsMode::last, logits).has_value());
  return 0;
}
