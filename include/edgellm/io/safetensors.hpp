// SPDX-License-Identifier: Apache-2.0
// safetensors files: a fully validated header parser, the dtype table, and memory-mapped files
// with views of their tensors. Checkpoint directories of one or more files are io/checkpoint.hpp.
#pragma once

#include "edgellm/config.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::io {

/// Element types of safetensors (the `dtype` strings of the format, in its own order of width).
enum class dtype : std::uint8_t {
  bool_,        ///< "BOOL", 1 byte
  u8,           ///< "U8"
  i8,           ///< "I8"
  f8_e5m2,      ///< "F8_E5M2"
  f8_e4m3,      ///< "F8_E4M3"
  f8_e8m0,      ///< "F8_E8M0"
  f8_e4m3fnuz,  ///< "F8_E4M3FNUZ"
  f8_e5m2fnuz,  ///< "F8_E5M2FNUZ"
  i16,          ///< "I16", 2 bytes
  u16,          ///< "U16"
  f16,          ///< "F16"
  bf16,         ///< "BF16"
  i32,          ///< "I32", 4 bytes
  u32,          ///< "U32"
  f32,          ///< "F32"
  c64,          ///< "C64", 8 bytes (complex of two f32)
  f64,          ///< "F64"
  i64,          ///< "I64"
  u64,          ///< "U64"
  f4,           ///< "F4", 4 bits (sub-byte; packed)
  f6_e2m3,      ///< "F6_E2M3", 6 bits (sub-byte; packed)
  f6_e3m2,      ///< "F6_E3M2", 6 bits (sub-byte; packed)
};

namespace detail {
struct DtypeEntry {
  dtype type;
  std::string_view name;
  std::size_t bits;
};
inline constexpr DtypeEntry kDtypes[] = {
    {dtype::bool_, "BOOL", 8},
    {dtype::u8, "U8", 8},
    {dtype::i8, "I8", 8},
    {dtype::f8_e5m2, "F8_E5M2", 8},
    {dtype::f8_e4m3, "F8_E4M3", 8},
    {dtype::f8_e8m0, "F8_E8M0", 8},
    {dtype::f8_e4m3fnuz, "F8_E4M3FNUZ", 8},
    {dtype::f8_e5m2fnuz, "F8_E5M2FNUZ", 8},
    {dtype::i16, "I16", 16},
    {dtype::u16, "U16", 16},
    {dtype::f16, "F16", 16},
    {dtype::bf16, "BF16", 16},
    {dtype::i32, "I32", 32},
    {dtype::u32, "U32", 32},
    {dtype::f32, "F32", 32},
    {dtype::c64, "C64", 64},
    {dtype::f64, "F64", 64},
    {dtype::i64, "I64", 64},
    {dtype::u64, "U64", 64},
    {dtype::f4, "F4", 4},
    {dtype::f6_e2m3, "F6_E2M3", 6},
    {dtype::f6_e3m2, "F6_E3M2", 6},
};
}  // namespace detail

/// The format's spelling of a dtype ("F16", "BF16", ...).
inline constexpr std::string_view dtype_name(dtype t) noexcept {
  for (const auto& e : detail::kDtypes) {
    if (e.type == t) return e.name;
  }
  return "?";
}
/// Bits per element: 4 or 6 for the packed sub-byte types, else 8 × the byte size.
inline constexpr std::size_t dtype_bits(dtype t) noexcept {
  for (const auto& e : detail::kDtypes) {
    if (e.type == t) return e.bits;
  }
  return 0;
}
/// Bytes per element; 0 for the sub-byte types (F4, F6_*), whose elements are not addressable.
inline constexpr std::size_t dtype_size(dtype t) noexcept {
  const std::size_t b = dtype_bits(t);
  return b % 8 == 0 ? b / 8 : 0;
}
/// The dtype spelled `name` (case-sensitive, as the format requires), or nullopt.
inline constexpr std::optional<dtype> parse_dtype(std::string_view name) noexcept {
  for (const auto& e : detail::kDtypes) {
    if (e.name == name) return e.type;
  }
  return std::nullopt;
}

/// One tensor as described by a safetensors header, after validation.
struct TensorInfo {
  std::string name;
  dtype type = dtype::u8;
  std::vector<std::size_t> shape;  ///< row-major; [] is a scalar; 0-sized dims allowed
  std::size_t offset = 0;          ///< absolute byte offset in the file (8 + N + begin)
  std::size_t nbytes = 0;          ///< end - begin == numel × bits / 8

  /// Product of the shape (1 for a scalar). Cannot overflow: the header parser checked it.
  std::size_t numel() const noexcept {
    std::size_t n = 1;
    for (const std::size_t d : shape) n *= d;
    return n;
  }
};

/// "[4096, 11008]"
inline std::string shape_to_string(std::span<const std::size_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

class SafetensorsHeader;
inline result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> file,
                                                          std::string_view file_name);

/// The validated header of a safetensors file. Built only by parse_safetensors_header().
class SafetensorsHeader {
 public:
  /// N: length of the JSON header in bytes (including trailing padding).
  std::size_t header_size() const noexcept { return header_size_; }
  /// 8 + N: absolute offset of the data buffer.
  std::size_t data_offset() const noexcept { return header_size_ + 8; }
  /// Length of the data buffer; equals the end of the last tensor.
  std::size_t data_size() const noexcept { return data_size_; }
  /// All tensors, ordered by offset (the order the bytes lie in the file).
  const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  /// `__metadata__` entries in document order (typically {"format": "pt"}).
  const std::vector<std::pair<std::string, std::string>>& metadata() const noexcept {
    return metadata_;
  }
  /// The value of `__metadata__[key]`, or nullptr.
  const std::string* metadata_value(std::string_view key) const noexcept {
    for (const auto& kv : metadata_) {
      if (kv.first == key) return &kv.second;
    }
    return nullptr;
  }
  /// The tensor named `name`, or nullptr. O(log n).
  const TensorInfo* find(std::string_view name) const noexcept {
    const auto it = std::lower_bound(
        by_name_.begin(), by_name_.end(), name,
        [this](std::size_t i, std::string_view n) { return tensors_[i].name < n; });
    if (it == by_name_.end() || tensors_[*it].name != name) return nullptr;
    return &tensors_[*it];
  }
  /// Sum of all tensors' byte sizes (== data_size()).
  std::size_t total_bytes() const noexcept { return data_size_; }

 private:
  friend result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> file,
                                                            std::string_view file_name);
  std::size_t header_size_ = 0;
  std::size_t data_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::vector<std::size_t> by_name_;  // indices into tensors_, sorted by name
  std::vector<std::pair<std::string, std::string>> metadata_;
};

/// Largest header the reference implementation accepts (safetensors MAX_HEADER_SIZE).
inline constexpr std::size_t kMaxSafetensorsHeaderSize = 100'000'000;

namespace detail {

inline error st_error(std::string_view file_name, std::string_view what,
                      errc code = errc::format_error) {
  std::string m(file_name);
  m += ": ";
  m += what;
  return make_error(code, "safetensors", m);
}

inline error st_tensor_error(std::string_view file_name, std::string_view tensor,
                             std::string_view what, errc code = errc::format_error) {
  std::string m("tensor '");
  m += tensor;
  m += "': ";
  m += what;
  return st_error(file_name, m, code);
}

/// A non-negative integer JSON value as size_t.
inline std::optional<std::size_t> json_size(const json::Value& v) noexcept {
  const auto i = v.get_int();
  if (!i || *i < 0) return std::nullopt;
  if (static_cast<std::uint64_t>(*i) > std::numeric_limits<std::size_t>::max()) return std::nullopt;
  return static_cast<std::size_t>(*i);
}

inline bool mul_overflows(std::size_t a, std::size_t b, std::size_t& out) noexcept {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) return true;
  out = a * b;
  return false;
}

}  // namespace detail

/// Parses and validates the header of a safetensors file held entirely in `file` (usually a
/// mapping of it). `file_name` names the file in messages. Checks, as the reference reader does
/// and more: the file holds the 8-byte length N; N <= 100,000,000 and 8 + N <= file size; the
/// header starts with '{' and is one JSON object (strict JSON, valid UTF-8, no duplicate keys,
/// trailing whitespace padding allowed); `__metadata__`, if present, maps strings to strings;
/// every other member is a tensor {"dtype": known string, "shape": [non-negative integers],
/// "data_offsets": [begin, end]} (other keys are ignored, as the reference does); numel × bits is
/// computed without overflow and is a whole number of bytes equal to end − begin; every range lies
/// in the data buffer; sorted by begin, the tensors tile the data buffer exactly (first begin 0,
/// no holes, no overlaps) and 8 + N + last end == file size.
/// Errors are errc::format_error ("[safetensors] <file>: tensor 'x': ..."), except an unknown
/// dtype, which is errc::unsupported.
inline result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> file,
                                                          std::string_view file_name) {
  using detail::st_error;
  using detail::st_tensor_error;
  const std::size_t file_size = file.size();
  if (file_size < 8) {
    return st_error(file_name, "file is " + std::to_string(file_size) +
                                   " bytes, too short for the 8-byte header length");
  }
  std::uint64_t n64 = 0;
  for (int i = 7; i >= 0; --i) {
    n64 = (n64 << 8) | static_cast<std::uint64_t>(
                           std::to_integer<unsigned char>(file[static_cast<std::size_t>(i)]));
  }
  if (n64 > kMaxSafetensorsHeaderSize) {
    return st_error(file_name, "header length " + std::to_string(n64) + " exceeds the limit of " +
                                   std::to_string(kMaxSafetensorsHeaderSize) + " bytes");
  }
  const auto n = static_cast<std::size_t>(n64);
  if (n > file_size - 8) {
    return st_error(file_name, "header length " + std::to_string(n) +
                                   " runs past the end of the file (" + std::to_string(file_size) +
                                   " bytes): truncated file?");
  }
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, n);
  if (text.empty() || text.front() != '{') {
    return st_error(file_name, "header does not start with '{'");
  }

  json::ParseOptions popt;
  popt.max_depth = 64;  // the header nests 3 deep; no need to allow more
  popt.max_bytes = kMaxSafetensorsHeaderSize;
  popt.reject_duplicate_keys = true;
  const std::string what = std::string(file_name) + " (header)";
  auto root = json::parse(text, what, popt);
  if (!root) return error{errc::format_error, root.error().message};
  const json::Object* obj = root->get_object();
  if (obj == nullptr) return st_error(file_name, "header is not a JSON object");

  SafetensorsHeader h;
  h.header_size_ = n;
  const std::size_t data_size = file_size - 8 - n;
  h.tensors_.reserve(obj->size());

  for (const json::Member& m : *obj) {
    if (m.key == "__metadata__") {
      const json::Object* md = m.value.get_object();
      if (md == nullptr) {
        return st_error(file_name,
                        "__metadata__ must be an object mapping strings to strings, "
                        "not " +
                            json::describe(m.value));
      }
      for (const json::Member& kv : *md) {
        const std::string* sv = kv.value.get_string();
        if (sv == nullptr) {
          return st_error(file_name, "__metadata__ value of \"" + kv.key +
                                         "\" must be a string, not " + json::describe(kv.value));
        }
        h.metadata_.emplace_back(kv.key, *sv);
      }
      continue;
    }
    const std::string& name = m.key;
    const json::Object* t = m.value.get_object();
    if (t == nullptr) {
      return st_tensor_error(file_name, name,
                             "entry must be an object with dtype, shape and data_offsets, not " +
                                 json::describe(m.value));
    }
    TensorInfo info;
    info.name = name;

    const json::Value* dt = t->find("dtype");
    if (dt == nullptr) return st_tensor_error(file_name, name, "missing \"dtype\"");
    const std::string* dts = dt->get_string();
    if (dts == nullptr) {
      return st_tensor_error(file_name, name,
                             "\"dtype\" must be a string, not " + json::describe(*dt));
    }
    const auto parsed = parse_dtype(*dts);
    if (!parsed) {
      return st_tensor_error(file_name, name, "unknown dtype " + json::describe(*dt),
                             errc::unsupported);
    }
    info.type = *parsed;

    const json::Value* sh = t->find("shape");
    if (sh == nullptr) return st_tensor_error(file_name, name, "missing \"shape\"");
    const json::Array* sha = sh->get_array();
    if (sha == nullptr) {
      return st_tensor_error(file_name, name,
                             "\"shape\" must be an array, not " + json::describe(*sh));
    }
    info.shape.reserve(sha->size());
    std::size_t numel = 1;
    bool overflow = false;
    for (const json::Value& d : *sha) {
      const auto dim = detail::json_size(d);
      if (!dim) {
        return st_tensor_error(
            file_name, name,
            "shape entries must be non-negative integers, found " + json::describe(d));
      }
      info.shape.push_back(*dim);
      overflow = overflow || detail::mul_overflows(numel, *dim, numel);
    }
    const std::size_t bits_per = dtype_bits(info.type);
    std::size_t bits = 0;
    if (overflow || detail::mul_overflows(numel, bits_per, bits)) {
      return st_tensor_error(file_name, name,
                             "shape " + shape_to_string(info.shape) + " of " +
                                 std::string(dtype_name(info.type)) +
                                 " overflows the size computation");
    }
    if (bits % 8 != 0) {
      return st_tensor_error(file_name, name,
                             std::to_string(numel) + " elements of " +
                                 std::string(dtype_name(info.type)) +
                                 " are not a whole number of bytes");
    }
    info.nbytes = bits / 8;

    const json::Value* off = t->find("data_offsets");
    if (off == nullptr) return st_tensor_error(file_name, name, "missing \"data_offsets\"");
    const json::Array* offa = off->get_array();
    if (offa == nullptr || offa->size() != 2) {
      return st_tensor_error(
          file_name, name,
          "\"data_offsets\" must be an array [begin, end], not " + json::describe(*off));
    }
    const auto begin = detail::json_size((*offa)[0]);
    const auto end = detail::json_size((*offa)[1]);
    if (!begin || !end) {
      return st_tensor_error(
          file_name, name,
          "\"data_offsets\" must hold non-negative integers, not " + json::dump(*off));
    }
    const std::string range =
        "data_offsets [" + std::to_string(*begin) + ", " + std::to_string(*end) + "]";
    if (*end < *begin) return st_tensor_error(file_name, name, range + " end before begin");
    if (*end > data_size) {
      return st_tensor_error(file_name, name,
                             range + " run past the end of the " + std::to_string(data_size) +
                                 "-byte data buffer: truncated file?");
    }
    if (*end - *begin != info.nbytes) {
      return st_tensor_error(file_name, name,
                             "shape " + shape_to_string(info.shape) + " of " +
                                 std::string(dtype_name(info.type)) + " needs " +
                                 std::to_string(info.nbytes) + " bytes but " + range + " span " +
                                 std::to_string(*end - *begin));
    }
    info.offset = 8 + n + *begin;  // cannot overflow: <= file_size
    h.tensors_.push_back(std::move(info));
  }

  // Tiling: sorted by (begin, end), each tensor must start where the previous one ended.
  auto& ts = h.tensors_;
  std::sort(ts.begin(), ts.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.offset != b.offset) return a.offset < b.offset;
    if (a.nbytes != b.nbytes) return a.nbytes < b.nbytes;
    return a.name < b.name;
  });
  const std::size_t base = 8 + n;
  std::size_t expected = 0;  // relative offset where the next tensor must begin
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const std::size_t begin = ts[i].offset - base;
    if (begin != expected) {
      if (i == 0) {
        return st_tensor_error(file_name, ts[i].name,
                               "the first tensor begins at data offset " + std::to_string(begin) +
                                   ", leaving a hole of " + std::to_string(begin) +
                                   " bytes at the start of the data buffer");
      }
      const std::string& prev = ts[i - 1].name;
      if (begin > expected) {
        return st_tensor_error(file_name, ts[i].name,
                               "begins at data offset " + std::to_string(begin) +
                                   " but the previous tensor '" + prev + "' ends at " +
                                   std::to_string(expected) + ": a hole of " +
                                   std::to_string(begin - expected) + " bytes");
      }
      return st_tensor_error(file_name, ts[i].name,
                             "begins at data offset " + std::to_string(begin) +
                                 ", overlapping tensor '" + prev + "', which ends at " +
                                 std::to_string(expected));
    }
    expected = begin + ts[i].nbytes;
  }
  if (expected != data_size) {
    return st_error(file_name, "tensors end at data offset " + std::to_string(expected) +
                                   " but the data buffer holds " + std::to_string(data_size) +
                                   " bytes: " + std::to_string(data_size - expected) +
                                   " trailing bytes belong to no tensor");
  }
  h.data_size_ = data_size;

  h.by_name_.resize(ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) h.by_name_[i] = i;
  std::sort(h.by_name_.begin(), h.by_name_.end(),
            [&ts](std::size_t a, std::size_t b) { return ts[a].name < ts[b].name; });
  return h;
}

/// A tensor's description and its bytes (borrowed from the file that owns them).
struct TensorView {
  const TensorInfo* info = nullptr;
  std::span<const std::byte> bytes;

  const std::string& name() const noexcept { return info->name; }
  dtype type() const noexcept { return info->type; }
  const std::vector<std::size_t>& shape() const noexcept { return info->shape; }
  std::size_t numel() const noexcept { return info->numel(); }
  /// Whether the bytes may be read in place as elements of the dtype: the address is a multiple
  /// of the element size (for a mapped file, the same as (8 + N + begin) % size == 0). Files from
  /// current writers are aligned; old or foreign ones may not be, and callers must then copy.
  /// Sub-byte dtypes count as aligned.
  bool is_aligned() const noexcept {
    const std::size_t sz = dtype_size(info->type);
    return sz <= 1 || reinterpret_cast<std::uintptr_t>(bytes.data()) % sz == 0;
  }
};

/// An open safetensors file: the mapping plus its validated header. Move-only; views into it stay
/// valid until it is destroyed (moving it keeps them valid: the mapping does not move).
class SafetensorsFile {
 public:
  /// Maps `path` and validates its header (see parse_safetensors_header). Messages name the path.
  static result<SafetensorsFile> open(const std::string& path) {
    auto mf = MappedFile::open(path);
    if (!mf) return mf.error();
    auto h = parse_safetensors_header(mf->bytes(), path);
    if (!h) return h.error();
    SafetensorsFile f;
    f.file_ = std::move(*mf);
    f.header_ = std::move(*h);
    return f;
  }

  const std::string& path() const noexcept { return file_.path(); }
  const SafetensorsHeader& header() const noexcept { return header_; }
  /// All tensors in file order.
  const std::vector<TensorInfo>& tensors() const noexcept { return header_.tensors(); }
  /// The tensor named `name`, or nullptr.
  const TensorInfo* find(std::string_view name) const noexcept { return header_.find(name); }
  /// A view of the tensor named `name`; errc::out_of_range "missing tensor 'x' in <path>" if
  /// absent.
  result<TensorView> tensor(std::string_view name) const {
    const TensorInfo* info = find(name);
    if (info == nullptr) {
      return make_error(errc::out_of_range, "SafetensorsFile::tensor",
                        "missing tensor '" + std::string(name) + "' in " + path());
    }
    return view(*info);
  }
  /// The view of `info`, which must be one of this file's tensors().
  TensorView view(const TensorInfo& info) const noexcept {
    EDGELLM_ASSERT(info.offset <= file_.size() && info.nbytes <= file_.size() - info.offset,
                   "SafetensorsFile::view: the TensorInfo is not from this file");
    return TensorView{&info, file_.bytes().subspan(info.offset, info.nbytes)};
  }
  /// The mapping, e.g. for lock() or advise_willneed().
  MappedFile& mapping() noexcept { return file_; }
  const MappedFile& mapping() const noexcept { return file_; }

 private:
  SafetensorsFile() = default;
  MappedFile file_;
  SafetensorsHeader header_;
};

}  // namespace edgellm::io
