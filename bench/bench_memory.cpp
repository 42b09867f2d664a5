// SPDX-License-Identifier: Apache-2.0
// Memory read bandwidth per thread count: the roofline that GEMV's gbps column is read against.
#include "harness.hpp"

#include <cstddef>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  namespace bench = edgellm::bench;
  const bench::options opts = bench::parse_options(argc, argv);

  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> default_threads{1};
  if (hw > 1) default_threads.push_back(hw);
  // 1 GiB in total (far past any last-level cache); --quick: 64 MiB, still past most.
  const std::size_t total_bytes = opts.quick ? std::size_t{64} << 20 : std::size_t{1} << 30;
  const int reps = opts.reps_or(opts.quick ? 2 : 5);

  bench::table out(opts, {"name", "threads", "mib_per_thread", "reps", "gbps", "peak_rss_mib"});
  for (const int threads : opts.threads_or(default_threads)) {
    const std::string name = "read_u64_sum";
    if (!opts.selected(name)) continue;
    const std::size_t per_thread = total_bytes / static_cast<std::size_t>(threads);
    bench::note("[memory] {} thread(s) x {} MiB, {} reps", threads, per_thread >> 20, reps);
    const double gbps = bench::measure_read_bandwidth_gbps(threads, per_thread, reps);
    out.row({name, threads, static_cast<double>(per_thread) / (1 << 20), reps,
             gbps > 0 ? edgellm::bench::value(gbps) : edgellm::bench::value(),  // 0: failed
             static_cast<double>(bench::peak_rss_bytes()) / (1 << 20)});
  }
  return 0;
}
