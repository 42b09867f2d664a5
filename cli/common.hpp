// SPDX-License-Identifier: Apache-2.0
// What every edgellm-* command line program (the tools/ and the bench/ ones) does the same way:
// --version, a usage error, a prompt from a file or stdin, whether its output really reached
// stdout, and the progress of a model load. The flag table they parse their command lines with
// (llama.cpp's spellings, the --threads cap) is cli/flags.hpp.
#pragma once

#include "edgellm/config.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/kernels/matmul.hpp"
#include "edgellm/result.hpp"
#include "build_info.hpp"

#include <xsimd/xsimd.hpp>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include <sys/stat.h>
#include <unistd.h>

namespace edgellm::cli {

/// Exit status of a malformed command line (unknown flag, missing or bad value), on every tool.
inline constexpr int kUsageExit = 2;

/// What --version prints: the edgellm version, the git commit it was built from, the build type
/// and flags (the ISA the compiler targeted), the SIMD set of the exact path (fixed at compile
/// time) and the int4 microkernel the runtime dispatch picks on this CPU.
inline std::string version_text(std::string_view prog) {
  std::string s(prog);
  s += " (edgellm " + std::to_string(EDGELLM_VERSION_MAJOR) + "." +
       std::to_string(EDGELLM_VERSION_MINOR) + "." + std::to_string(EDGELLM_VERSION_PATCH);
  s += ", git ";
  s += build_info::git_sha();
  s += ")\nbuild: ";
  s += build_info::build_type();
  s += ", flags: ";
  s += build_info::flags();
  s += "\n";
  s += "simd: ";
  s += xsimd::default_arch::name();
  s += " (exact path, chosen at compile time)\n";
  s += "microkernel: ";
  s += kernels::isa_name(kernels::best_isa());
  s += " (int4 fast path, chosen at run time for this CPU)\n";
  return s;
}

/// The text of the file `path` named by command-line flag `flag`, at most `max_bytes`: a regular
/// file through io::read_text_file; stdin when `path` is "-"; a FIFO or pipe (`-f <(cmd)`) read
/// as a stream to its end, as stdin is. Devices and directories are refused, as every library
/// reader refuses them. Errors name the flag and the file.
inline result<std::string> read_text_argument(const std::string& path, std::string_view flag,
                                              std::size_t max_bytes) {
  const bool is_stdin = path == "-";
  struct stat st {};
  if (!is_stdin && (::stat(path.c_str(), &st) != 0 || !S_ISFIFO(st.st_mode))) {
    return io::read_text_file(path, max_bytes);  // its errors name the file
  }
  const std::string name = is_stdin ? "'-' (stdin)" : "'" + path + "'";
  std::FILE* f = is_stdin ? stdin : std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return make_error(errc::io_error, flag,
                      name + ": cannot open for reading: " + std::strerror(errno));
  }
  std::string out;
  char buf[1 << 16];
  bool too_big = false;
  for (;;) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f);
    if (out.size() + n > max_bytes) {
      too_big = true;
      break;
    }
    out.append(buf, n);
    if (n < sizeof buf) break;
  }
  const int err = errno;
  const bool failed = !too_big && std::ferror(f) != 0;
  if (!is_stdin) std::fclose(f);
  if (too_big) {
    return make_error(errc::io_error, flag,
                      name + ": more than the " + std::to_string(max_bytes) + "-byte limit");
  }
  if (failed) {
    return make_error(errc::io_error, flag, name + ": read failed: " + std::strerror(err));
  }
  return out;
}

/// Largest prompt -f/--file reads (a file, a pipe or stdin): far above any context, below a
/// mistake such as a checkpoint's path.
inline constexpr std::size_t kMaxPromptFileBytes = std::size_t{64} << 20;

/// The text of -f/--file `path` (read_text_argument, at most kMaxPromptFileBytes).
inline result<std::string> read_prompt_file(const std::string& path) {
  return read_text_argument(path, "--file", kMaxPromptFileBytes);
}

/// Flushes stdout and returns `rc`, or 1 with a message on stderr when anything written to it
/// was lost (stdout closed, a full disk, a closed pipe with SIGPIPE ignored): the output is then
/// incomplete and the exit status must say so. `earlier_errno`: the errno of a write that failed
/// before (its buffer is gone, so this flush may not see the error again).
inline int finish_stdout(const char* prog, int rc, int earlier_errno = 0) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = flushed ? earlier_errno : errno;
  if (!flushed || std::ferror(stdout) != 0 || earlier_errno != 0) {
    std::fprintf(stderr, "%s: error writing to stdout: %s\n", prog,
                 err != 0 ? std::strerror(err) : "write failed");
    return rc == 0 ? 1 : rc;
  }
  return rc;
}

/// --version: prints version_text to stdout; the exit status (0, or 1 when stdout lost it).
inline int print_version(const char* prog) {
  const std::string text = version_text(prog);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return finish_stdout(prog, 0);
}

/// "" when a context of `positions` fits the model's max_position_embeddings `max_position` (0:
/// unknown), or when `force` (--force-context) allows it; else the usage error (exit 2), naming
/// `flag` and `what` (the flag's value as the user gave it: "4096", "a prompt of 3000 ids").
inline std::string check_context(std::string_view flag, std::string_view what,
                                 std::size_t positions, std::size_t max_position, bool force) {
  if (force || max_position == 0 || positions <= max_position) return {};
  return std::string(flag) + ": " + std::string(what) +
         " is above the model's max_position_embeddings " + std::to_string(max_position) +
         " (positions it was not trained for; --force-context runs it anyway)";
}

/// Prints "PROG: MSG" and the pointer to --help on stderr; returns kUsageExit.
inline int usage_error(const char* prog, std::string_view msg) {
  std::fprintf(stderr, "%s: %.*s\n(--help for usage)\n", prog, static_cast<int>(msg.size()),
               msg.data());
  return kUsageExit;
}

/// Draws the progress of a long step (model::LoadOptions::progress) on stderr: on a terminal one
/// bar with percent and ETA redrawn in place, otherwise one line per 10 % (at most 11 lines a
/// stage), nothing when `quiet`. A stage shows up only once it has run for `delay` (a step that
/// takes a fraction of a second is not worth a bar); one that finishes sooner prints nothing.
/// Call finish() before printing anything else.
class ProgressBar {
 public:
  static constexpr std::chrono::milliseconds kDefaultDelay{1000};

  explicit ProgressBar(bool quiet, bool terminal = ::isatty(STDERR_FILENO) == 1,
                       std::chrono::milliseconds delay = kDefaultDelay)
      : quiet_(quiet), terminal_(terminal), delay_(delay) {}

  void operator()(std::string_view stage, std::uint64_t done, std::uint64_t total) {
    if (quiet_) return;
    const auto now = std::chrono::steady_clock::now();
    if (stage != stage_) {
      finish();
      stage_ = stage;
      start_ = now;
      last_decile_ = -1;
      complete_ = false;
      shown_ = false;
    }
    if (complete_) return;  // 100 % was drawn (or skipped): a repeated last call draws nothing
    if (!shown_) {
      if (done >= total) {  // finished before `delay`: not worth a line
        complete_ = true;
        return;
      }
      if (now - start_ < delay_) return;
      shown_ = true;
    }
    const double frac = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
    const int pct = static_cast<int>(frac * 100.0);
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    if (!terminal_) {
      if (pct / 10 <= last_decile_) return;
      last_decile_ = pct / 10;
      std::fprintf(stderr, "%.*s: %3d%%\n", static_cast<int>(stage_.size()), stage_.data(),
                   last_decile_ * 10);
      return;
    }
    // Redraw at most every 0.1 s (and always at the end): a terminal is slow to scroll.
    if (open_ && done < total && now - drawn_ < std::chrono::milliseconds(100)) return;
    drawn_ = now;
    constexpr int kWidth = 30;
    const int fill = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<std::size_t>(fill), '#');
    bar.resize(kWidth, '.');
    std::string eta;
    if (done >= total) {
      eta = "done in " + std::to_string(static_cast<long long>(elapsed * 10) / 10) + "." +
            std::to_string(static_cast<long long>(elapsed * 10) % 10) + " s";
    } else if (frac > 0.01 && elapsed > 0.5) {
      eta = "ETA " + std::to_string(static_cast<long long>(elapsed * (1 - frac) / frac + 0.5)) + " s";
    }
    std::fprintf(stderr, "\r%.*s [%s] %3d%% %s\033[K", static_cast<int>(stage_.size()),
                 stage_.data(), bar.c_str(), pct, eta.c_str());
    open_ = true;
    if (done >= total) {
      complete_ = true;
      finish();
    }
  }

  /// Ends the bar's line on a terminal (so that the next message starts on its own line).
  void finish() {
    if (open_) std::fputc('\n', stderr);
    open_ = false;
  }

 private:
  bool quiet_, terminal_, open_ = false, complete_ = false, shown_ = false;
  std::chrono::milliseconds delay_;
  std::string stage_;
  std::chrono::steady_clock::time_point start_{}, drawn_{};
  int last_decile_ = -1;
};

}  // namespace edgellm::cli
