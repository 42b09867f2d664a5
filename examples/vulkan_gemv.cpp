// SPDX-License-Identifier: Apache-2.0
// The int4 GEMV on a Vulkan device: quantise a weight matrix to int4 group 128, upload it once,
// run y = x W^T on the GPU (or lavapipe), check it against the CPU, and print the device, the
// GEMV's weight streaming rate and the bandwidth probe's on the same device.
//   edgellm-example-vulkan-gemv [--device N] [--validation] [n k]
// Without a Vulkan loader or device it says so and exits 1 (the CPU path needs none of this).
#include <edgellm/backend/vulkan/gemv_q4.hpp>
#include <edgellm/backend/vulkan/membw_probe.hpp>
#include <edgellm/kernels.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  namespace vk = edgellm::backend::vk;
  using namespace edgellm::kernels;
  vk::DeviceOptions options;
  std::size_t n = 2048, k = 2048;
  std::vector<std::size_t> dims;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      options.device_index = static_cast<std::uint32_t>(std::strtoul(argv[++i], nullptr, 10));
    } else if (a == "--validation") {
      options.validation = true;
    } else if (!a.empty() && a.find_first_not_of("0123456789") == std::string::npos) {
      dims.push_back(std::strtoull(a.c_str(), nullptr, 10));
    } else {
      std::fprintf(stderr, "usage: %s [--device N] [--validation] [n k] (got '%s')\n", argv[0],
                   a.c_str());
      return 2;
    }
  }
  if (dims.size() == 2) n = dims[0], k = dims[1];

  auto dev = vk::Device::create(options);
  if (!dev) return std::fprintf(stderr, "%s\n", dev.error().message.c_str()), 1;
  const auto& info = (*dev)->info();
  std::printf("device %u: %s (%s), subgroup %u, shaderInt8 %d, int dot product %d\n", info.index,
              info.name.c_str(), vk::to_string(info.type), info.subgroup_size, info.shader_int8,
              info.integer_dot_product);

  // 1. Quantise and pack on the CPU, as a model load does.
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(n * k), x(k);
  for (auto& v : w) v = normal(rng);
  for (auto& v : x) v = normal(rng) * 50.0f;
  auto q = quantize_rtn(w, n, k, 128);
  if (!q) return std::fprintf(stderr, "%s\n", q.error().message.c_str()), 1;
  auto packed = pack_q4(*q);
  if (!packed) return std::fprintf(stderr, "%s\n", packed.error().message.c_str()), 1;

  // 2. Upload once; run.
  auto op = vk::GemvQ4::create(**dev, *packed);
  if (!op) return std::fprintf(stderr, "%s\n", op.error().message.c_str()), 1;
  std::vector<float> y(n), want(n);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    if (auto st = op->run(x, y); !st) return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  reference::gemv_q4(*packed, x.data(), want.data(), nullptr);
  double max_diff = 0, max_abs = 0;
  for (std::size_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(y[i]) - want[i]));
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(want[i])));
  }
  const double gemv_rate = static_cast<double>(packed->byte_size()) / best;
  std::printf("gemv_q4 [%zu x %zu], workgroup %u: max |diff| vs CPU %.2e of max |y| %.2e; "
              "%.2f ms, %.2f GB/s of weights (incl. submit and read-back)\n",
              n, k, op->workgroup_size(), max_diff, max_abs, best * 1e3, gemv_rate / 1e9);

  // 3. The same device's plain read bandwidth, over a buffer as large as the weights.
  auto probe = vk::MembwProbe::create(**dev, packed->byte_size());
  if (!probe) return std::fprintf(stderr, "%s\n", probe.error().message.c_str()), 1;
  auto bw = probe->run(5);
  if (!bw) return std::fprintf(stderr, "%s\n", bw.error().message.c_str()), 1;
  std::printf("membw probe: %.2f GB/s over %zu bytes; gemv at %.0f %% of it\n",
              bw->bytes_per_second / 1e9, bw->bytes, 100.0 * gemv_rate / bw->bytes_per_second);
  const auto log = (*dev)->validation_log();
  if ((*dev)->validation_enabled())
    std::printf("validation: %zu message(s) so far\n", log->messages().size());
  for (const auto& m : log->messages()) std::fprintf(stderr, "%s\n", m.c_str());
  return max_diff <= 1e-3 * std::max(max_abs, 1.0) && log->empty() ? 0 : 1;
}
