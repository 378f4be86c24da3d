#pragma once
// The loop over a row of floats in Highway vectors that the elementwise kernels share: whole
// vectors with plain loads and stores, and only the last, partial vector with a mask (masked
// loads read zeros past the end, masked stores leave it alone). Masking every vector instead
// took about twice the time inside training steps on Zen 5 for LayerNorm's backward (perf
// samples over the same steps), although a streaming loop showed no difference; the cause is not
// pinned down. Include after "hwy/highway.h" in a translation unit built for Highway's static
// target.
#include <cstdint>

#include "hwy/highway.h"

namespace attnkit::vec {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using MF = hn::Mask<DF>;

inline constexpr int64_t kLanes = int64_t(hn::MaxLanes(DF()));  // static target: a constant

// body(j, mask) for j = 0, kLanes, ... < n: mask null for a whole vector [j, j + kLanes), else
// the lanes below n of the last, partial one. Pass the mask to load() and store().
template <class Body>
HWY_INLINE void for_each_vector(int64_t n, const Body& body) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) body(j, static_cast<const MF*>(nullptr));
  if (j < n) {
    const MF tail = hn::FirstN(DF(), size_t(n - j));
    body(j, &tail);
  }
}

// The vector at p: a plain load, or with mask the lanes it selects and zeros elsewhere.
HWY_INLINE VF load(const float* p, const MF* mask) {
  return mask ? hn::MaskedLoad(*mask, DF(), p) : hn::LoadU(DF(), p);
}

// Stores v at p: all lanes, or with mask only the lanes it selects.
HWY_INLINE void store(VF v, float* p, const MF* mask) {
  if (mask)
    hn::BlendedStore(v, *mask, DF(), p);
  else
    hn::StoreU(v, DF(), p);
}

}  // namespace attnkit::vec
