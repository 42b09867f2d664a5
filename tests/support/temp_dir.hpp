// SPDX-License-Identifier: Apache-2.0
// A scratch directory for tests that write files (bad checkpoints, configs, mapped files).
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>

namespace edgellm::test {

/// A fresh directory under the system temp dir, removed with its contents on destruction.
/// The name mixes the pid, a counter and a random number so parallel test processes never clash.
class TempDir {
 public:
  explicit TempDir(std::string_view tag = "edgellm-test") {
    static std::atomic<unsigned> counter{0};
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            (std::string(tag) + "-" + std::to_string(::getpid()) + "-" +
             std::to_string(counter++) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  /// The path of `name` inside the directory.
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  /// Writes `bytes` to `name` (binary) and returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::filesystem::path p = path_ / name;
    std::ofstream f(p, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace edgellm::test
