// Validation and sequence bookkeeping shared by every attention backend.
#include "attnkit/attention/attention.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"

namespace attnkit {
namespace {

void check_cu_seqlens(std::span<const int32_t> cu, int64_t total, const char* name) {
  check(cu.size() >= 2, name, ": needs at least 2 entries (B+1), got ", cu.size());
  check(cu[0] == 0, name, ": must start at 0, got ", cu[0]);
  for (size_t i = 1; i < cu.size(); ++i)
    check(cu[i] >= cu[i - 1], name, ": must be non-decreasing, but entry ", i, " = ", cu[i],
          " < entry ", i - 1, " = ", cu[i - 1]);
  check(cu.back() == total, name, ": must end at the token count ", total, ", ends at ",
        cu.back());
}

void check_view(const ConstView3& t, const char* name) {
  check_view_extents(t, name);
  check(t.inner_contiguous(), name, ": last dimension must be contiguous (stride 1), got stride ",
        t.stride[2]);
  // Rows of one head are read as a matrix with leading dimension stride[0] (BLAS): it must not
  // overlap the row itself or run backwards.
  check(t.shape[0] <= 1 || t.stride[0] >= t.shape[2], name, ": token stride ", t.stride[0],
        " must be >= the head dim ", t.shape[2]);
}

// Largest exponent field of p[0..n) (0x7f800000 iff some entry is NaN or ±inf): an integer max
// reduction, which vectorises (a float NaN-propagating sum is a serial dependency chain).
uint32_t max_exponent_bits(const float* p, int64_t n) {
  uint32_t acc = 0;
  for (int64_t d = 0; d < n; ++d) acc = std::max(acc, std::bit_cast<uint32_t>(p[d]) & 0x7f800000u);
  return acc;
}

}  // namespace

// The scan over q, k, v (and d_out) streams them from memory once per call, so tokens are split
// over the threads (a serial scan took 9% of a ViT training step).
void check_finite(const ConstView3& t, const char* name) {
  constexpr int64_t kTokens = 256;
  const int64_t blocks = (t.shape[0] + kTokens - 1) / kTokens;
  std::vector<uint8_t> bad(size_t(blocks), 0);
  const bool packed_heads = t.stride[1] == t.shape[2];  // one token's heads are one run
  parallel_for(blocks, [&](int64_t b) {
    uint32_t acc = 0;
    for (int64_t i = b * kTokens; i < std::min(t.shape[0], (b + 1) * kTokens); ++i) {
      if (packed_heads) {
        acc = std::max(acc, max_exponent_bits(t.ptr(i), t.shape[1] * t.shape[2]));
        continue;
      }
      for (int64_t j = 0; j < t.shape[1]; ++j)
        acc = std::max(acc, max_exponent_bits(t.ptr(i, j), t.shape[2]));
    }
    bad[size_t(b)] = acc == 0x7f800000u;
  });
  for (int64_t b = 0; b < blocks; ++b) {
    if (!bad[size_t(b)]) continue;
    for (int64_t i = b * kTokens; i < std::min(t.shape[0], (b + 1) * kTokens); ++i)
      for (int64_t j = 0; j < t.shape[1]; ++j)
        for (int64_t d = 0; d < t.shape[2]; ++d) {
          const float v = t.ptr(i, j)[d];
          check(std::isfinite(v), name, ": non-finite value ", v, " at [", i, ", ", j, ", ", d, "]");
        }
  }
}

int64_t num_sequences(const AttentionArgs& a) {
  return a.cu_seqlens_q.empty() ? 1 : int64_t(a.cu_seqlens_q.size()) - 1;
}

SeqSpan sequence_span(const AttentionArgs& a, int64_t b) {
  const int64_t count = num_sequences(a);
  check(b >= 0 && b < count, "sequence_span: sequence ", b, " out of range [0, ", count, ")");
  if (a.cu_seqlens_q.empty()) return {0, a.q.shape[0], 0, a.k.shape[0]};
  return {a.cu_seqlens_q[b], a.cu_seqlens_q[b + 1], a.cu_seqlens_k[b], a.cu_seqlens_k[b + 1]};
}

float effective_scale(const AttentionOptions& o, int64_t head_dim) {
  return o.scale != 0 ? o.scale : float(1.0 / std::sqrt(double(head_dim)));
}

void check_inputs_finite(const AttentionArgs& a) {
  check_finite(a.q, "q");
  check_finite(a.k, "k");
  check_finite(a.v, "v");
}

void validate(const AttentionOptions& o, const AttentionArgs& a) {
  validate_layout(o, a);
  check_inputs_finite(a);
}

void validate_layout(const AttentionOptions& o, const AttentionArgs& a) {
  check_view(a.q, "q");
  check_view(a.k, "k");
  check_view(a.v, "v");
  const int64_t h = a.q.shape[1], d = a.q.shape[2], hkv = a.k.shape[1];
  check(h >= 1, "q: needs at least one head, got H = ", h);
  check(d >= 1, "q: head dim must be >= 1, got ", d);
  check(hkv >= 1, "k: needs at least one head, got Hkv = ", hkv);
  check(h % hkv == 0, "k: query heads H = ", h, " must be a multiple of KV heads Hkv = ", hkv);
  check(a.k.shape[2] == d, "k: head dim ", a.k.shape[2], " != q head dim ", d);
  check(a.v.shape[0] == a.k.shape[0] && a.v.shape[1] == hkv && a.v.shape[2] == d,
        "v: shape [", a.v.shape[0], ", ", a.v.shape[1], ", ", a.v.shape[2], "] != k shape [",
        a.k.shape[0], ", ", hkv, ", ", d, "]");
  if (!a.out.empty()) {  // the reference backward recomputes out and may leave it empty
    check_view(a.out, "out");
    check(a.out.shape == a.q.shape, "out: shape must equal q's [", a.q.shape[0], ", ", h, ", ",
          d, "]");
  }
  if (!a.lse.empty())
    check(a.lse.shape[0] == h && a.lse.shape[1] == a.q.shape[0], "lse: shape must be [H, Tq] = [",
          h, ", ", a.q.shape[0], "], got [", a.lse.shape[0], ", ", a.lse.shape[1], "]");
  check(a.cu_seqlens_q.empty() == a.cu_seqlens_k.empty(),
        "cu_seqlens_q and cu_seqlens_k: give both or neither");
  if (!a.cu_seqlens_q.empty()) {
    check_cu_seqlens(a.cu_seqlens_q, a.q.shape[0], "cu_seqlens_q");
    check_cu_seqlens(a.cu_seqlens_k, a.k.shape[0], "cu_seqlens_k");
    check(a.cu_seqlens_q.size() == a.cu_seqlens_k.size(), "cu_seqlens_k: has ",
          a.cu_seqlens_k.size(), " entries, cu_seqlens_q has ", a.cu_seqlens_q.size());
  }
  validate_sink_logits(a.sink_logits, h);
  if (!a.alibi_slopes.empty()) {
    const int64_t n = int64_t(a.alibi_slopes.size()), nseq = num_sequences(a);
    check(n == h || n == nseq * h, "alibi_slopes: needs H = ", h, " or B·H = ", nseq * h,
          " entries ([H] or [B, H]), got ", n);
    for (int64_t i = 0; i < n; ++i)
      check(std::isfinite(a.alibi_slopes[size_t(i)]), "alibi_slopes: must be finite, got ",
            a.alibi_slopes[size_t(i)], " at entry ", i);
  }
  validate_options(o);
}

void validate_options(const AttentionOptions& o) {
  check(std::isfinite(o.scale) && o.scale >= 0, "scale: must be finite and >= 0 (0 = 1/sqrt(D)), got ",
        o.scale);
  check(std::isfinite(o.softcap) && o.softcap >= 0, "softcap: must be finite and >= 0, got ",
        o.softcap);
  check(o.dropout_p >= 0 && o.dropout_p < 1, "dropout_p: must be in [0, 1), got ", o.dropout_p);
  check(o.window_left >= -1, "window_left: must be >= -1, got ", o.window_left);
  check(o.window_right >= -1, "window_right: must be >= -1, got ", o.window_right);
}

void validate_sink_logits(std::span<const float> sink_logits, int64_t heads) {
  if (sink_logits.empty()) return;
  check(int64_t(sink_logits.size()) == heads, "sink_logits: needs H = ", heads, " entries, got ",
        sink_logits.size());
  for (float b : sink_logits) check(std::isfinite(b), "sink_logits: must be finite, got ", b);
}

void check_backward_inputs_finite(const AttentionArgs& a, const AttentionGrads& g) {
  check_inputs_finite(a);
  check_finite(g.d_out, "d_out");
}

void validate_backward(const AttentionOptions& o, const AttentionArgs& a,
                       const AttentionGrads& g) {
  validate_backward_layout(o, a, g);
  check_backward_inputs_finite(a, g);
}

void validate_backward_layout(const AttentionOptions& o, const AttentionArgs& a,
                              const AttentionGrads& g) {
  validate_layout(o, a);
  check_view(g.d_out, "d_out");
  check_view(g.d_q, "d_q");
  check_view(g.d_k, "d_k");
  check_view(g.d_v, "d_v");
  check(g.d_out.shape == a.q.shape, "d_out: shape must equal q's");
  check(g.d_q.shape == a.q.shape, "d_q: shape must equal q's");
  check(g.d_k.shape == a.k.shape, "d_k: shape must equal k's");
  check(g.d_v.shape == a.v.shape, "d_v: shape must equal v's");
  check(g.d_sink.size() == a.sink_logits.size(), "d_sink: needs ", a.sink_logits.size(),
        " entries (one per sink logit), got ", g.d_sink.size());
}

}  // namespace attnkit
