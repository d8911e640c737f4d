// Host tensors for tests: a [batch, seq, heads, dim] view of a byte buffer in any
// storage dtype and layout. Buffers are poisoned with NaN before a backend writes
// them, so an unwritten element fails, and padding that must stay untouched is
// checked afterwards.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flash/flash.hpp"

namespace flash::test {

enum class Layout {
  packed,  // [batch, seq, heads, dim], strides left zero in the descriptor
  bhsd,    // [batch, heads, seq, dim] through strides
  padded,  // packed, with each head row and each batch padded (16-byte multiples)
};

const char* to_string(Layout layout);

struct HostTensor {
  DType dtype = DType::f32;
  int64_t batch = 0, seq = 0, heads = 0, dim = 0;
  Strides stride;                 // what goes into the descriptor (zero for packed)
  int64_t resolved[3] = {};       // actual element strides
  std::vector<uint64_t> storage;  // 8-byte aligned backing store
  int64_t capacity_ = 0;

  HostTensor() = default;
  HostTensor(DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim, Layout layout);

  void* data() { return storage.data(); }
  const void* data() const { return storage.data(); }
  int64_t capacity() const { return capacity_; }  // elements in the buffer (view + padding)
  int64_t offset(int64_t b, int64_t s, int64_t h) const {
    return b * resolved[0] + s * resolved[1] + h * resolved[2];
  }
  int64_t elements() const { return batch * seq * heads * dim; }

  double get(int64_t b, int64_t s, int64_t h, int64_t d) const;
  void set(int64_t b, int64_t s, int64_t h, int64_t d, double value);  // rounds to dtype

  // Uniform in [-amplitude, amplitude], rounded to the dtype; never all zero.
  void fill_random(std::mt19937_64& rng, double amplitude);
  void poison();  // every element of the buffer NaN
  // True when no element outside the view was written (all padding still NaN).
  bool padding_untouched() const;
  // View as a packed double vector [batch, seq, heads, dim].
  std::vector<double> to_packed() const;
};

// Poisoned f32 buffer for lse [batch, heads_q, seqlen_q].
std::vector<float> poisoned_lse(int64_t count);

}  // namespace flash::test
