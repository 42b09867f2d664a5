// SPDX-License-Identifier: Apache-2.0
// What the libFuzzer targets in tests/fuzz share: the check macro, the fixture paths, a scratch
// directory on tmpfs, file helpers, the framing that splits one input into several files, seed
// writing, and the replay main() used where there is no libFuzzer (GCC).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

// A broken invariant is a bug: stop so that libFuzzer records the input.
#define EDGELLM_FUZZ_CHECK(cond)   \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

#ifndef EDGELLM_SOURCE_DIR
#error "EDGELLM_SOURCE_DIR (the repository root) must be defined: the targets read tests/data"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace edgellm::fuzz {

/// `rel` under tests/data of the source tree (fixtures read by the targets).
inline std::string data_path(std::string_view rel) {
  return std::string(EDGELLM_SOURCE_DIR) + "/tests/data/" + std::string(rel);
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void write_file(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EDGELLM_FUZZ_CHECK(f.good());  // a harness that cannot write its scratch files is broken
}

/// A directory for one fuzzing process, on tmpfs (/dev/shm) where there is one so that each
/// input's files never touch a disk; removed with its contents on destruction. libFuzzer does not
/// always end with static destructors (a crash, some -runs=N exits), so the constructor also
/// removes the directories of this tag left by processes that no longer exist.
class ScratchDir {
 public:
  explicit ScratchDir(std::string_view tag) {
    std::error_code ec;
    std::filesystem::path base = "/dev/shm";
    if (!std::filesystem::is_directory(base, ec) || ::access(base.c_str(), W_OK) != 0)
      base = std::filesystem::temp_directory_path();
    const std::string prefix = "edgellm-fuzz-" + std::string(tag) + "-";
    for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        std::filesystem::remove_all(e.path(), ec);
    }
    path_ = base / (prefix + std::to_string(::getpid()));
    std::filesystem::remove_all(path_, ec);
    std::filesystem::create_directories(path_, ec);
    EDGELLM_FUZZ_CHECK(!ec);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(std::string_view name) const { return (path_ / name).string(); }
  /// Empties the directory (keeps the directory itself).
  void clear() const {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(path_, ec))
      std::filesystem::remove_all(e.path(), ec);
  }

 private:
  std::filesystem::path path_;
};

/// Framing of one input into several named files (checkpoint directories): a sequence of
/// records `u8 file, u32 LE length, bytes`, where `file` picks one of `names` (modulo its size)
/// and a length past the end of the input takes the rest. A later record for the same file
/// replaces the earlier one. Names are fixed so no input can write outside the directory.
struct FramedFile {
  std::size_t name;
  std::string_view bytes;
};

inline std::vector<FramedFile> unframe(std::string_view in, std::size_t names) {
  std::vector<FramedFile> out;
  std::size_t at = 0;
  while (in.size() - at >= 5) {
    const std::size_t name = static_cast<unsigned char>(in[at]) % names;
    std::uint32_t len = 0;
    for (int i = 0; i < 4; ++i)
      len |= static_cast<std::uint32_t>(static_cast<unsigned char>(in[at + 1 + i])) << (8 * i);
    at += 5;
    const std::size_t n = std::min<std::size_t>(len, in.size() - at);
    out.push_back(FramedFile{name, in.substr(at, n)});
    at += n;
  }
  return out;
}

/// The inverse of unframe() for one file (seed writing).
inline std::string frame(std::size_t name, std::string_view bytes) {
  std::string s(1, static_cast<char>(name));
  for (int i = 0; i < 4; ++i) s += static_cast<char>((bytes.size() >> (8 * i)) & 0xFF);
  s += bytes;
  return s;
}

/// Seed writing: a target whose seeds are made by code (they depend on a model's bytes or
/// fingerprint) writes them when EDGELLM_FUZZ_WRITE_SEEDS names a directory, then exits
/// (tools/make_fuzz_seeds.sh). Returns that directory, or empty when not asked.
inline std::string seed_dir() {
  const char* d = std::getenv("EDGELLM_FUZZ_WRITE_SEEDS");
  return d != nullptr ? std::string(d) : std::string();
}

inline void write_seed(const std::string& dir, std::string_view name, std::string_view bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  write_file(std::filesystem::path(dir) / name, bytes);
  std::printf("wrote seed %s/%.*s (%zu bytes)\n", dir.c_str(), static_cast<int>(name.size()),
              name.data(), bytes.size());
}

}  // namespace edgellm::fuzz

#if defined(EDGELLM_FUZZ_REPLAY_MAIN)
// Without libFuzzer (GCC): run every file named on the command line, or found in a directory
// named there, through the target once. Sanitizers and the checks report any failure.
#include <algorithm>

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  LLVMFuzzerInitialize(&argc, &argv);
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::directory_iterator(p)) {
        if (e.is_regular_file()) inputs.push_back(e.path());
      }
    } else {
      inputs.push_back(p);
    }
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& p : inputs) {
    const std::string bytes = edgellm::fuzz::read_file(p);
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs\n", inputs.size());
  return inputs.empty() ? 1 : 0;
}
#endif
