// SPDX-License-Identifier: Apache-2.0
// What every edgellm-* command line tool checks the same way: the --threads cap and whether
// its output really reached stdout.
#pragma once

#include "edgellm/detail/cpu_topology.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

namespace edgellm::tools {

/// "" when `threads` is a usable --threads value, else why not (a usage error, exit 2): 0, or
/// above detail::max_threads_flag() (4 x the hardware threads, at most 256). Above the hardware
/// threads alone it prints a warning to stderr and accepts.
inline std::string check_threads(const char* prog, std::size_t threads) {
  const std::size_t hw = detail::hardware_threads(), cap = detail::max_threads_flag(hw);
  if (threads == 0 || threads > cap) {
    return "--threads: " + std::to_string(threads) + " is not in [1, " + std::to_string(cap) +
           "] (at most 4 x the " + std::to_string(hw) + " hardware threads, and 256)";
  }
  if (hw != 0 && threads > hw) {
    std::fprintf(stderr,
                 "%s: warning: --threads %zu is more than the %zu hardware threads; the extra "
                 "threads wait for a core and slow every step\n",
                 prog, threads, hw);
  }
  return {};
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

}  // namespace edgellm::tools
