// Naive attention: repeat K/V to H heads, materialise S = scale·Q·Kᵀ for every head, softcap,
// add the ALiBi bias, mask, softmax over the full row, O = P·V. PyTorch:
// torch.softmax(q @ k.repeat_interleave(G).T * s + bias + mask, -1) @ v.repeat_interleave(G).
#include "attnkit/attention/attention_naive.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/vec_math.hpp"

namespace attnkit {

int64_t attention_naive_bytes(const AttentionArgs& a) {
  int64_t worst = 0;
  for (int64_t b = 0; b < num_sequences(a); ++b) {
    const SeqSpan s = sequence_span(a, b);
    worst = std::max(worst, (s.q_end - s.q_begin) * (s.k_end - s.k_begin));
  }
  const int64_t h = a.q.shape[1], d = a.q.shape[2];
  return int64_t(sizeof(float)) * (h * worst + 2 * a.k.shape[0] * h * d);
}

void attention_naive(const AttentionOptions& o, const AttentionArgs& a) {
  validate(o, a);
  check(o.dropout_p == 0, "dropout_p: the naive baseline has no dropout");
  const int64_t h = a.q.shape[1], d = a.q.shape[2], g = h / a.k.shape[1], tk = a.k.shape[0];
  const float scale = effective_scale(o, d);
  // K and V repeated to H heads, head-major [H, Tk, D], as repeat_interleave + transpose would.
  std::vector<float> kr(static_cast<size_t>(h * tk * d)), vr(kr.size());
  parallel_for(h, [&](int64_t hh) {
    for (int64_t t = 0; t < tk; ++t) {
      std::copy_n(a.k.ptr(t, hh / g), d, &kr[size_t((hh * tk + t) * d)]);
      std::copy_n(a.v.ptr(t, hh / g), d, &vr[size_t((hh * tk + t) * d)]);
    }
  });
  std::vector<float> scores;
  BlasThreadsScope blas(1);
  for (int64_t b = 0; b < num_sequences(a); ++b) {
    const SeqSpan s = sequence_span(a, b);
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
    scores.resize(static_cast<size_t>(h * lq * lk));
    parallel_for(h, [&](int64_t hh) {
      float* sc = scores.data() + hh * lq * lk;
      const float* kh = &kr[size_t((hh * tk + s.k_begin) * d)];
      const float* vh = &vr[size_t((hh * tk + s.k_begin) * d)];
      sgemm(false, true, lq, lk, d, scale, a.q.ptr(s.q_begin, hh), a.q.stride[0], kh, d, 0.0f, sc,
            lk);
      for (int64_t i = 0; i < lq; ++i) {
        float* x = sc + i * lk;
        if (o.softcap > 0) softcap_inplace(x, lk, o.softcap);
        const float slope = alibi_slope(a, b, hh);
        for (int64_t j = 0; slope != 0 && j < lk; ++j)
          x[j] -= slope * float(std::abs(i + lk - lq - j));
        const KeyRange vis = visible_keys(o, i, lq, lk);
        std::fill(x, x + vis.lo, -std::numeric_limits<float>::infinity());
        std::fill(x + vis.hi, x + lk, -std::numeric_limits<float>::infinity());
        const bool sink = !a.sink_logits.empty();
        const float b_h = sink ? a.sink_logits[size_t(hh)] : -std::numeric_limits<float>::infinity();
        const float m = std::max(row_max(x, lk), b_h);
        if (std::isinf(m)) {  // nothing visible: zeros and lse = -inf
          std::fill(x, x + lk, 0.0f);
          if (!a.lse.empty()) a.lse(hh, s.q_begin + i) = m;
          continue;
        }
        const float sum = exp_sub_sum(x, lk, m) + (sink ? std::exp(b_h - m) : 0.0f);
        scale_inplace(x, lk, 1.0f / sum);
        if (!a.lse.empty()) a.lse(hh, s.q_begin + i) = m + std::log(sum);
      }
      // O = P·V, written through out's strides (rows of head hh).
      std::vector<float> o_h(static_cast<size_t>(lq * d));
      sgemm(false, false, lq, d, lk, 1.0f, sc, lk, vh, d, 0.0f, o_h.data(), d);
      for (int64_t i = 0; i < lq; ++i) std::copy_n(&o_h[size_t(i * d)], d, a.out.ptr(s.q_begin + i, hh));
    });
  }
}

}  // namespace attnkit
