// Decode reference: the cache gathered to float32 in cache order, rope applied by cache position,
// then attention_reference with Lq = n and Lk = cached tokens (ALiBi slopes of the sequence).
#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/attention/attention.hpp"
#include "attnkit/attention/attention_reference.hpp"
#include "attnkit/attention/decode.hpp"
#include "attnkit/ops/rope.hpp"

namespace attnkit {

void validate(const DecodeOptions& o, const DecodeArgs& a) {
  check(a.cache != nullptr, "cache: required");
  const auto& c = a.cache->config();
  check(a.layer >= 0 && a.layer < c.layers, "layer: ", a.layer, " out of range [0, ", c.layers, ")");
  check(!a.seqs.empty(), "seqs: at least one sequence");
  check_view_extents(a.q, "q");
  check_view_extents(a.out, "out");
  check(a.q.shape[0] % int64_t(a.seqs.size()) == 0, "q: ", a.q.shape[0],
        " query rows are not a multiple of the ", a.seqs.size(), " sequences");
  check(a.q.shape[2] == c.head_dim, "q: head dim ", a.q.shape[2], " != cache head_dim ", c.head_dim);
  check(a.q.shape[1] % c.kv_heads == 0, "q: heads ", a.q.shape[1], " not a multiple of cache kv_heads ",
        c.kv_heads);
  check(a.out.shape == a.q.shape, "out: shape must equal q's");
  check(a.q.inner_contiguous(), "q: last dimension must be contiguous");
  check(a.out.inner_contiguous(), "out: last dimension must be contiguous");
  if (!a.lse.empty()) {
    check_view_extents(a.lse, "lse");
    check(a.lse.shape[0] == a.q.shape[1] && a.lse.shape[1] == a.q.shape[0], "lse: expected [H, B·n] = [",
          a.q.shape[1], ", ", a.q.shape[0], "], got [", a.lse.shape[0], ", ", a.lse.shape[1], "]");
  }
  check_finite(a.q, "q");
  validate_options(o.attention);
  check(o.attention.dropout_p == 0, "dropout_p: decode has no dropout");
  check(std::isfinite(o.rope_theta) && o.rope_theta >= 0, "rope_theta: must be finite and >= 0, got ",
        o.rope_theta);
  if (o.rope_theta > 0) check(c.head_dim % 2 == 0, "rope_theta: needs an even head_dim");
  const int64_t n = a.q.shape[0] / int64_t(a.seqs.size());
  const int64_t h = a.q.shape[1], nseq = int64_t(a.seqs.size());
  validate_sink_logits(a.sink_logits, h);
  if (!a.alibi_slopes.empty()) {
    const int64_t count = int64_t(a.alibi_slopes.size());
    check(count == h || count == nseq * h, "alibi_slopes: needs H = ", h, " or B·H = ",
          nseq * h, " entries ([H] or [B, H], B = len(seqs)), got ", count);
    for (int64_t i = 0; i < count; ++i)
      check(std::isfinite(a.alibi_slopes[size_t(i)]), "alibi_slopes: must be finite, got ",
            a.alibi_slopes[size_t(i)], " at entry ", i);
  }
  for (int64_t s : a.seqs) {
    check(a.cache->active(s), "seqs: sequence ", s, " is not active in the cache");
    check(a.cache->cached(s, a.layer) >= n, "seqs: sequence ", s, " caches ",
          a.cache->cached(s, a.layer), " tokens in layer ", a.layer, ", fewer than the ", n,
          " queries (append the new tokens' K/V first)");
  }
}

void decode_attention_reference(const DecodeOptions& o, const DecodeArgs& a) {
  validate(o, a);
  const auto& c = a.cache->config();
  const int64_t b = int64_t(a.seqs.size()), n = a.q.shape[0] / b, h = a.q.shape[1];
  const int64_t hkv = c.kv_heads, d = c.head_dim;
  for (int64_t s = 0; s < b; ++s) {
    const int64_t held = a.cache->cached(a.seqs[size_t(s)], a.layer);
    Tensor<float, 3> k({held, hkv, d}), v({held, hkv, d}), q({n, h, d}), out({n, h, d});
    Tensor<float, 2> lse({h, n});
    a.cache->gather(a.seqs[size_t(s)], a.layer, k.view(), v.view());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t hh = 0; hh < h; ++hh) std::copy_n(a.q.ptr(s * n + i, hh), d, q.view().ptr(i, hh));
    if (o.rope_theta > 0) {
      for (int64_t t = 0; t < held; ++t)
        for (int64_t hh = 0; hh < hkv; ++hh) rope_rotate_at(k.view().ptr(t, hh), d, double(t), o.rope_theta);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t hh = 0; hh < h; ++hh)
          rope_rotate_at(q.view().ptr(i, hh), d, double(held - n + i), o.rope_theta);
    }
    // One sequence: its [H] row of [B, H] slopes (or the shared [H], or none).
    std::span<const float> slopes = a.alibi_slopes;
    if (int64_t(slopes.size()) == b * h && b > 1) slopes = slopes.subspan(size_t(s * h), size_t(h));
    AttentionArgs args{.q = q.view(), .k = k.view(), .v = v.view(), .sink_logits = a.sink_logits,
                       .alibi_slopes = slopes,
                       .out = out.view(), .lse = lse.view()};
    attention_reference(o.attention, args);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t hh = 0; hh < h; ++hh) {
        std::copy_n(out.view().ptr(i, hh), d, a.out.ptr(s * n + i, hh));
        if (!a.lse.empty()) a.lse(hh, s * n + i) = lse.view()(hh, i);
      }
  }
}

}  // namespace attnkit
