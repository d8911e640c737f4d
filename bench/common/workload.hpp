// One problem set up on one device: inputs filled, outputs allocated, and the call
// that a benchmark times (forward, or backward after one forward made o and lse).
#pragma once

#include <cstdint>
#include <vector>

#include "common/device.hpp"
#include "flash/flash.hpp"

namespace bench {

enum class Tensor { q, k, v, o, dout, dq, dk, dv };

// Inputs in host memory, in desc.dtype: q, k, v, and dout for a backward.
struct HostInputs {
  std::vector<unsigned char> q, k, v, dout;
};

// `elements` seeded pseudo-random values of dtype, uniform with mean 0 and variance 1.
std::vector<unsigned char> random_tensor(size_t elements, flash::DType dtype, uint64_t seed);

// Seeded pseudo-random values with unit variance; the same (desc, seed) gives the same
// bytes, so every backend and the reference see identical inputs.
HostInputs make_host_inputs(const flash::AttentionDesc& desc, bool backward, uint64_t seed);

class Workload {
 public:
  // desc: the problem, its inference arrays (if any) in host memory; its backend
  // decides where it runs. The arrays are copied to the device, where q lives, and the
  // stream is taken from device. Outputs start as NaN so an element a backend never
  // writes shows up as an error.
  Workload(const flash::AttentionDesc& desc, bool backward, Device& device,
           const HostInputs& inputs);

  // Everything run() needs that is not measured: for backward, the forward that
  // produces o and lse. Call once before timing.
  void prepare();
  // The measured call; on a GPU it only queues work on device.stream().
  void run();

  // The descriptor the measured call gets (arrays in the device's memory).
  const flash::AttentionDesc& desc() const { return desc_; }
  bool backward() const { return backward_; }
  // A tensor read back from the device and widened to float.
  std::vector<float> read_as_float(Tensor which);

 private:
  DeviceBuffer& buffer(Tensor which);

  flash::AttentionDesc desc_;
  bool backward_;
  Device& device_;
  DeviceBuffer q_, k_, v_, o_, lse_, dout_, dq_, dk_, dv_;
  DeviceBuffer cu_seqlens_q_, cu_seqlens_kv_, seqlens_kv_, block_table_;
};

}  // namespace bench
