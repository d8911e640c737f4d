// The reference registered as a backend ("reference"): computes in double with
// reference::forward/backward and rounds each output once to the storage type.
#include <cmath>
#include <limits>

#include "dispatch/backend_adapter.hpp"
#include "reference/dtype.hpp"
#include "reference/reference.hpp"
#include "reference/sequences.hpp"

namespace flash::detail {
namespace {

int64_t at(const int64_t* stride, int64_t b, int64_t s, int64_t h) {
  return b * stride[0] + s * stride[1] + h * stride[2];
}

// Writes a packed [batch, seq, heads, dim] double tensor into a strided output.
void store_tensor(const std::vector<double>& packed, void* out, int32_t dtype,
                  const int64_t* stride, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h) {
        const double* src = &packed[((b * seq + s) * heads + h) * dim];
        const int64_t dst = at(stride, b, s, h);
        for (int64_t d = 0; d < dim; ++d) reference::store(out, dtype, dst + d, src[d]);
      }
}

struct ReferenceBackend {
  static const char* name() { return "reference"; }
  static bool probe(std::string&, std::string& detail) {
    detail = "scalar loops, double accumulation";
    return true;
  }
  static bool owns_pointer(const void*) { return false; }
  static Choice choose(const flash_problem&, int) { return Choice::run("reference.scalar.f64"); }

  static void forward(const flash_problem& p, const void* q, const void* k, const void* v,
                      void* o) {
    const reference::ForwardResult r = reference::forward(p, q, k, v);
    store_q_rows(p, r.o, o, p.o_stride, p.head_dim_v);
    if (p.lse)
      for (size_t i = 0; i < r.lse.size(); ++i) p.lse[i] = static_cast<float>(r.lse[i]);
  }

  static void backward(const flash_problem& p, const void* q, const void* k, const void* v,
                       const void*, const void* dout, const float*, void* dq, void* dk, void* dv) {
    const reference::BackwardResult r = reference::backward(p, q, k, v, dout);
    store_q_rows(p, r.dq, dq, p.q_stride, p.head_dim);
    // Packed keys are [1, total_kv] rows; dense keys [batch, seqlen_kv].
    const bool packed = p.cu_seqlens_kv != nullptr;
    const int64_t kb = packed ? 1 : p.batch, ks = packed ? reference::rows_kv(p) : p.seqlen_kv;
    store_tensor(r.dk, dk, p.dtype, p.k_stride, kb, ks, p.heads_kv, p.head_dim);
    store_tensor(r.dv, dv, p.dtype, p.v_stride, kb, ks, p.heads_kv, p.head_dim_v);
  }

  static void merge(const flash_problem& p, int64_t parts, const void* o_parts,
                    const float* lse_parts, void* o, float* lse) {
    const reference::ForwardResult r = reference::merge(p, parts, o_parts, lse_parts);
    store_q_rows(p, r.o, o, p.o_stride, p.head_dim_v);
    if (lse)
      for (size_t i = 0; i < r.lse.size(); ++i) lse[i] = static_cast<float>(r.lse[i]);
  }

 private:
  // Rows of q/o/dq: [1, total_q] when packed (cu_seqlens_q), else [batch, seqlen_q].
  static void store_q_rows(const flash_problem& p, const std::vector<double>& r, void* out,
                           const int64_t* stride, int64_t dim) {
    const bool packed = p.cu_seqlens_q != nullptr;
    store_tensor(r, out, p.dtype, stride, packed ? 1 : p.batch,
                 packed ? reference::rows_q(p) : p.seqlen_q, p.heads_q, dim);
  }
};

}  // namespace
}  // namespace flash::detail

extern "C" const flash_backend_module* flash_reference_module(void) {
  return flash::detail::make_module<flash::detail::ReferenceBackend>();
}
