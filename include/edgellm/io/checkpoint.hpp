// SPDX-License-Identifier: Apache-2.0
// Checkpoint directories: the tensors of a single safetensors file or of shards listed by
// model.safetensors.index.json, looked up by name across files (io/safetensors.hpp reads each
// file).
#pragma once

#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/io/safetensors.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace edgellm::io {

/// The tensors of a checkpoint directory, possibly spread over several safetensors files.
/// Move-only; views stay valid until it is destroyed.
class Checkpoint {
 public:
  /// Opens a checkpoint. `path` is a directory holding, in order of preference:
  ///   1. `model.safetensors` (used alone, as transformers does, even if an index also exists);
  ///   2. `model.safetensors.index.json` plus the shards its weight_map names;
  ///   3. exactly one other `*.safetensors` file.
  /// `path` may also name a single .safetensors file.
  /// The index is validated: it is a JSON object whose "weight_map" maps tensor names to plain
  /// file names (no directories); every named shard exists and is a valid safetensors file; every
  /// tensor is in the shard that names it; no tensor is in two shards. Tensors that a shard holds
  /// but the weight_map does not name are ignored. "metadata" (e.g. total_size) is not checked.
  static result<Checkpoint> open(const std::string& path);

  /// The directory (or the single file) given to open().
  const std::string& path() const noexcept { return path_; }
  /// The opened files, in shard order (mutable access is for mapping().lock() and advice).
  std::span<const SafetensorsFile> files() const noexcept { return files_; }
  std::span<SafetensorsFile> files() noexcept { return files_; }

  /// Number of tensors.
  std::size_t size() const noexcept { return entries_.size(); }
  bool contains(std::string_view name) const noexcept { return lookup(name) != nullptr; }
  /// The description of tensor `name`, or nullptr.
  const TensorInfo* info(std::string_view name) const noexcept {
    const Entry* e = lookup(name);
    return e ? &files_[e->file].tensors()[e->tensor] : nullptr;
  }
  /// A view of tensor `name`; errc::out_of_range "missing tensor 'x' in <path>" if absent.
  result<TensorView> find(std::string_view name) const {
    const Entry* e = lookup(name);
    if (e == nullptr) {
      return make_error(errc::out_of_range, "Checkpoint::find",
                        "missing tensor '" + std::string(name) + "' in " + path_);
    }
    const SafetensorsFile& f = files_[e->file];
    return f.view(f.tensors()[e->tensor]);
  }
  /// The file that holds tensor `name`, or nullptr.
  const SafetensorsFile* file_of(std::string_view name) const noexcept {
    const Entry* e = lookup(name);
    return e ? &files_[e->file] : nullptr;
  }
  /// All tensor names, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const Entry& e : entries_) out.push_back(files_[e.file].tensors()[e.tensor].name);
    return out;
  }
  /// Sum of the byte sizes of all tensors.
  std::size_t total_bytes() const noexcept {
    std::size_t s = 0;
    for (const Entry& e : entries_) s += files_[e.file].tensors()[e.tensor].nbytes;
    return s;
  }

 private:
  struct Entry {
    std::string_view name;  // points into files_[file].tensors()[tensor].name (never moves)
    std::size_t file;
    std::size_t tensor;
  };

  Checkpoint() = default;

  const Entry* lookup(std::string_view name) const noexcept {
    const auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                                     [](const Entry& e, std::string_view n) { return e.name < n; });
    return it != entries_.end() && it->name == name ? &*it : nullptr;
  }

  static result<Checkpoint> open_index(const std::filesystem::path& dir,
                                       const std::filesystem::path& index);
  void add_all_tensors(std::size_t file) {
    const auto& ts = files_[file].tensors();
    for (std::size_t i = 0; i < ts.size(); ++i) entries_.push_back(Entry{ts[i].name, file, i});
  }
  void sort_entries() {
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.name < b.name; });
  }

  std::string path_;
  std::vector<SafetensorsFile> files_;
  std::vector<Entry> entries_;  // sorted by name
};

inline result<Checkpoint> Checkpoint::open(const std::string& path) {
  namespace fs = std::filesystem;
  constexpr std::string_view where = "Checkpoint::open";
  std::error_code ec;
  const fs::path p(path);
  const fs::file_status st = fs::status(p, ec);
  if (ec || !fs::exists(st)) {
    return make_error(errc::io_error, where,
                      "'" + path + "': " + (ec ? ec.message() : "no such file or directory"));
  }

  std::optional<fs::path> single;
  if (fs::is_regular_file(st)) {
    single = p;
  } else if (!fs::is_directory(st)) {
    return make_error(errc::io_error, where, "'" + path + "': not a directory or a file");
  } else if (fs::is_regular_file(p / "model.safetensors", ec)) {
    single = p / "model.safetensors";
  } else if (fs::is_regular_file(p / "model.safetensors.index.json", ec)) {
    auto c = open_index(p, p / "model.safetensors.index.json");
    if (c) c->path_ = path;
    return c;
  } else {
    std::vector<std::string> found;
    fs::directory_iterator it(p, ec);
    if (ec)
      return make_error(errc::io_error, where, "'" + path + "': cannot list: " + ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const fs::path& e = it->path();
      std::error_code ec2;
      if (e.extension() == ".safetensors" && fs::is_regular_file(e, ec2)) {
        found.push_back(e.filename().string());
      }
    }
    if (ec) {
      return make_error(errc::io_error, where, "'" + path + "': cannot list: " + ec.message());
    }
    std::sort(found.begin(), found.end());
    if (found.empty()) {
      return make_error(errc::io_error, where,
                        "no model.safetensors, model.safetensors.index.json or other "
                        "*.safetensors file in " +
                            path);
    }
    if (found.size() > 1) {
      std::string list;
      for (const auto& f : found) list += (list.empty() ? "" : ", ") + f;
      return make_error(errc::format_error, where,
                        std::to_string(found.size()) + " *.safetensors files (" + list +
                            ") but no model.safetensors.index.json in " + path +
                            " to say how they form one checkpoint");
    }
    single = p / found.front();
  }

  auto f = SafetensorsFile::open(single->string());
  if (!f) return f.error();
  Checkpoint c;
  c.path_ = path;
  c.files_.push_back(std::move(*f));
  c.add_all_tensors(0);
  c.sort_entries();
  return c;
}

inline result<Checkpoint> Checkpoint::open_index(const std::filesystem::path& dir,
                                                 const std::filesystem::path& index) {
  constexpr std::string_view where = "Checkpoint::open";
  const std::string index_name = index.string();
  auto text = read_text_file(index_name, kMaxIndexJsonBytes);
  if (!text) return text.error();
  auto root = json::parse(*text, index_name);
  if (!root) return root.error();
  const auto bad = [&](const std::string& what) {
    return make_error(errc::format_error, where, index_name + ": " + what);
  };
  if (!root->is_object()) return bad("must be a JSON object, not " + json::describe(*root));
  const json::Value* wm = root->find("weight_map");
  if (wm == nullptr) return bad("missing \"weight_map\"");
  const json::Object* wmo = wm->get_object();
  if (wmo == nullptr) return bad("\"weight_map\" must be an object, not " + json::describe(*wm));
  if (wmo->empty()) return bad("\"weight_map\" is empty");

  // Shard file names in order of first appearance; each tensor maps to one of them.
  Checkpoint c;
  std::vector<std::string> shard_names;
  std::vector<std::size_t> tensor_shard(wmo->size());
  for (std::size_t i = 0; i < wmo->size(); ++i) {
    const json::Member& m = (*wmo)[i];
    const std::string* shard = m.value.get_string();
    if (shard == nullptr) {
      return bad("weight_map entry for tensor '" + m.key + "' must be a file name string, not " +
                 json::describe(m.value));
    }
    // Refuse paths: a shard must sit in the checkpoint directory.
    if (shard->empty() || *shard == "." || *shard == ".." ||
        shard->find_first_of("/\\") != std::string::npos ||
        shard->find('\0') != std::string::npos) {
      return bad("weight_map entry for tensor '" + m.key + "' names " + json::describe(m.value) +
                 ", which is not a plain file name in the checkpoint directory");
    }
    const auto it = std::find(shard_names.begin(), shard_names.end(), *shard);
    tensor_shard[i] = static_cast<std::size_t>(it - shard_names.begin());
    if (it == shard_names.end()) shard_names.push_back(*shard);
  }

  c.files_.reserve(shard_names.size());
  for (const std::string& s : shard_names) {
    const std::filesystem::path sp = dir / s;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(sp, ec)) {
      return make_error(
          errc::io_error, where,
          index_name + ": shard '" + s + "' named in weight_map does not exist in " + dir.string());
    }
    auto f = SafetensorsFile::open(sp.string());
    if (!f) return f.error();
    c.files_.push_back(std::move(*f));
  }

  // No tensor may be stored in two shards (whether or not the weight_map names it).
  {
    std::vector<std::pair<std::string_view, std::size_t>> all;
    for (std::size_t fi = 0; fi < c.files_.size(); ++fi) {
      for (const TensorInfo& t : c.files_[fi].tensors()) all.emplace_back(t.name, fi);
    }
    std::sort(all.begin(), all.end());
    for (std::size_t i = 1; i < all.size(); ++i) {
      if (all[i].first == all[i - 1].first) {
        return make_error(errc::format_error, where,
                          index_name + ": tensor '" + std::string(all[i].first) +
                              "' is stored in two shards, '" + shard_names[all[i - 1].second] +
                              "' and '" + shard_names[all[i].second] + "'");
      }
    }
  }

  c.entries_.reserve(wmo->size());
  for (std::size_t i = 0; i < wmo->size(); ++i) {
    const std::string& name = (*wmo)[i].key;
    const std::size_t fi = tensor_shard[i];
    const TensorInfo* t = c.files_[fi].find(name);
    if (t == nullptr) {
      return make_error(errc::format_error, where,
                        index_name + ": weight_map puts tensor '" + name + "' in shard '" +
                            shard_names[fi] + "', which does not contain it");
    }
    const auto ti = static_cast<std::size_t>(t - c.files_[fi].tensors().data());
    c.entries_.push_back(Entry{t->name, fi, ti});
  }
  c.sort_entries();
  return c;
}

}  // namespace edgellm::io
