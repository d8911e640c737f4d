#include "compare.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace flash::test {

double relative_epsilon(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 1e-6;
    case DType::f16:
      return 1e-4;
    case DType::bf16:
      return 1e-3;
  }
  return 0;
}

namespace {

// Max |a - b| over elements where both are finite or equal infinities; the index
// of the first element where only one side is NaN/inf (or -1).
double max_error(const std::vector<double>& a, const std::vector<double>& b, long& mismatch,
                 long& argmax) {
  double worst = 0;
  mismatch = -1;
  argmax = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;  // covers equal infinities (lse = -inf)
    const double e = std::fabs(a[i] - b[i]);
    if (!std::isfinite(e)) {
      if (mismatch < 0) mismatch = static_cast<long>(i);
      continue;
    }
    if (e > worst) {
      worst = e;
      argmax = static_cast<long>(i);
    }
  }
  return worst;
}

}  // namespace

double magnitude(const std::vector<double>& x) {
  double m = 0;
  for (double e : x)
    if (std::isfinite(e)) m = std::max(m, std::fabs(e));
  return m;
}

Verdict compare(const std::string& what, const std::vector<double>& got,
                const std::vector<double>& ref, const std::vector<double>& naive, DType dtype,
                double scale) {
  Verdict v;
  std::ostringstream out;
  if (got.size() != ref.size()) {
    out << what << ": size " << got.size() << " != reference size " << ref.size();
    v.detail = out.str();
    return v;
  }
  long mismatch, argmax, naive_mismatch, naive_argmax;
  v.error = max_error(got, ref, mismatch, argmax);
  v.naive_error = max_error(naive, ref, naive_mismatch, naive_argmax);
  if (scale < 0) scale = magnitude(ref);
  v.bound = 2 * v.naive_error + relative_epsilon(dtype) * scale + 1e-30;
  v.pass = mismatch < 0 && v.error <= v.bound;
  out << what << ": max error " << v.error << " vs bound " << v.bound << " (2 x naive "
      << v.naive_error << " + eps; " << static_cast<long long>(std::min(100 * v.share(), 1e15)) << "% used)";
  if (mismatch >= 0)
    out << "; element " << mismatch << " is " << got[mismatch] << ", reference " << ref[mismatch];
  else if (!v.pass)
    out << "; worst element " << argmax << " is " << got[argmax] << ", reference " << ref[argmax];
  v.detail = out.str();
  return v;
}

}  // namespace flash::test
