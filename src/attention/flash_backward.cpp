// Flash attention backward (FlashAttention-2, Dao 2023, Algorithm 2) on OpenBLAS tiles.
// From the forward: P = exp(t + bias - lse) with t = softcap(scale·q·kᵀ) and the constant ALiBi
// bias, out = (P∘Z)·v (Z = dropout).
// Then Δ_i = dO_i·out_i, dV = (P∘Z)ᵀ·dO, dP = Z∘(dO·Vᵀ), dS = P∘(dP - Δ)∘(1 - (t/c)²),
// dK = dSᵀ·(scale·Q), dQ = scale·dS·K, and for sinks d b_h = -Σ_i exp(b_h - lse_i)·Δ_i.
// Work items are (sequence, KV head, key tile); each owns its rows of dK/dV, which it sums over
// the G stacked query heads (no H-sized temporary). dQ needs a sum over key tiles: when there are
// enough (sequence, KV head) pairs, one item walks all key tiles of its pair in order and adds
// into dQ directly (5 GEMMs per block); otherwise a second pass over query tiles recomputes dS
// for dQ (7 GEMMs). The choice depends on the shape only, never on the thread count.
// S = Q·Kᵀ and dP = dO·Vᵀ run on the forward's packed score kernel (flash_tile_kernels.hpp: the
// key tile's K and V packed once per key tile, Q and dO once per query tile); the products that
// contract over query rows or keys (dV, dK, dQ) run on OpenBLAS sgemm.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/core/workspace.hpp"
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/vec_math.hpp"
#include "flash_common.hpp"
#include "flash_tile_kernels.hpp"

namespace attnkit {
namespace {

using flash::Context;
using flash::kNegInf;

constexpr int64_t kFusedMinPairs = 8;  // (sequence, KV head) pairs needed to fuse dQ
// Row stride of P, dS and t: a key tile plus one cache line (no L1 set aliasing across rows).
constexpr int64_t kLs = FlashTiles::kBwdKeyTile + 16;
static_assert(kLs % flash::kLanes == 0);

struct Buffers {   // per-thread scratch for one (query tile × key tile) block
  float* q;        // [rows, D] scale·Q
  float* dout;     // [rows, D] dO
  float* qp;       // scale·Q packed as row blocks (flash::pack_queries)
  float* doutp;    // dO packed as row blocks
  float* kp;       // K of the key tile packed as Kᵀ panels (flash::pack_keys)
  float* vp;       // V of the key tile packed as Kᵀ panels
  float* lse;      // [rows]
  float* delta;    // [rows] Δ
  float* p;        // [rows, kLs] probabilities
  float* ds;       // [rows, kLs] dP, then dS
  float* t;        // [rows, kLs] softcapped scores before ALiBi (softcap only)
  float* dq;       // [rows, D]
  float* dk;       // [kBwdKeyTile, D]
  float* dv;       // [kBwdKeyTile, D]
};

class Backward {
 public:
  Backward(const Context& c, const AttentionGrads& g, const float* delta, int64_t positions)
      : c_(c), g_(g), delta_(delta), positions_(positions) {}

  // dK, dV of keys [j0, j1) of KV head hk in sequence b; adds scale·dS·K into dQ if fuse_dq.
  void key_tile(int64_t b, int64_t hk, int64_t j0, int64_t j1, bool fuse_dq, Buffers& w) const {
    const SeqSpan s = sequence_span(c_.args, b);
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin, nk = j1 - j0;
    std::fill(w.dk, w.dk + nk * c_.d, 0.0f);
    std::fill(w.dv, w.dv + nk * c_.d, 0.0f);
    const float* k = c_.args.k.ptr(s.k_begin + j0, hk);
    pack_key_tile(s, hk, j0, j1, w);
    for (int64_t i0 = 0; i0 < lq; i0 += positions_) {
      const int64_t i1 = std::min(i0 + positions_, lq);
      if (visible_keys(c_.opts, i1 - 1, lq, lk).hi <= j0) continue;  // tile ends before the keys
      if (visible_keys(c_.opts, i0, lq, lk).lo >= j1) break;          // and every later one too
      const int64_t rows = (i1 - i0) * c_.g;
      load_rows(s, b, hk, i0, i1, w);
      probabilities_and_ds(s, b, hk, i0, i1, j0, j1, w);
      // dV += (P∘Z)ᵀ·dO, dK += dSᵀ·(scale·Q); w.p holds P∘Z after probabilities_and_ds.
      sgemm(true, false, nk, c_.d, rows, 1.0f, w.p, kLs, w.dout, c_.d, 1.0f, w.dv, c_.d);
      sgemm(true, false, nk, c_.d, rows, 1.0f, w.ds, kLs, w.q, c_.d, 1.0f, w.dk, c_.d);
      if (fuse_dq) {
        sgemm(false, false, rows, c_.d, nk, c_.scale, w.ds, kLs, k, c_.ld(c_.args.k), 0.0f, w.dq,
              c_.d);
        scatter_add_dq(s, hk, i0, i1, w.dq);
      }
    }
    for (int64_t j = 0; j < nk; ++j) {
      std::copy_n(w.dk + j * c_.d, c_.d, g_.d_k.ptr(s.k_begin + j0 + j, hk));
      std::copy_n(w.dv + j * c_.d, c_.d, g_.d_v.ptr(s.k_begin + j0 + j, hk));
    }
  }

  // dQ of query positions [i0, i1) of KV group hk in sequence b (the unfused second pass).
  void query_tile(int64_t b, int64_t hk, int64_t i0, int64_t i1, Buffers& w) const {
    const SeqSpan s = sequence_span(c_.args, b);
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
    const int64_t rows = (i1 - i0) * c_.g;
    const int64_t lo = visible_keys(c_.opts, i0, lq, lk).lo;
    const int64_t hi = visible_keys(c_.opts, i1 - 1, lq, lk).hi;
    load_rows(s, b, hk, i0, i1, w);
    std::fill(w.dq, w.dq + rows * c_.d, 0.0f);
    for (int64_t j0 = lo; j0 < hi; j0 += FlashTiles::kBwdKeyTile) {
      const int64_t j1 = std::min(j0 + FlashTiles::kBwdKeyTile, hi), nk = j1 - j0;
      pack_key_tile(s, hk, j0, j1, w);
      probabilities_and_ds(s, b, hk, i0, i1, j0, j1, w);
      sgemm(false, false, rows, c_.d, nk, c_.scale, w.ds, kLs, c_.args.k.ptr(s.k_begin + j0, hk),
            c_.ld(c_.args.k), 1.0f, w.dq, c_.d);
    }
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(w.dq + r * c_.d, c_.d, g_.d_q.ptr(s.q_begin + i0 + r / c_.g, head(hk, r)));
  }

 private:
  int64_t head(int64_t hk, int64_t row) const { return hk * c_.g + row % c_.g; }

  // w.kp, w.vp = K and V of keys [j0, j1) of KV head hk packed as Kᵀ panels.
  void pack_key_tile(const SeqSpan& s, int64_t hk, int64_t j0, int64_t j1, Buffers& w) const {
    const auto& a = c_.args;
    flash::pack_keys(a.k.ptr(s.k_begin + j0, hk), c_.ld(a.k), j1 - j0, c_.d, w.kp);
    flash::pack_keys(a.v.ptr(s.k_begin + j0, hk), c_.ld(a.v), j1 - j0, c_.d, w.vp);
  }

  void load_rows(const SeqSpan& s, int64_t b, int64_t hk, int64_t i0, int64_t i1,
                 Buffers& w) const {
    flash::gather_rows(c_.args.q, c_, s.q_begin, hk, i0, i1, c_.scale, w.q);
    flash::gather_rows(g_.d_out, c_, s.q_begin, hk, i0, i1, 1.0f, w.dout);
    flash::pack_queries(w.q, (i1 - i0) * c_.g, c_.d, w.qp);
    flash::pack_queries(w.dout, (i1 - i0) * c_.g, c_.d, w.doutp);
    const int64_t tq = c_.args.q.shape[0];
    for (int64_t r = 0; r < (i1 - i0) * c_.g; ++r) {
      const int64_t token = s.q_begin + i0 + r / c_.g, h = head(hk, r);
      w.lse[r] = c_.args.lse(h, token);
      w.delta[r] = delta_[h * tq + token];
    }
  }

  // w.p = P∘Z and w.ds = dS for rows of positions [i0, i1) against keys [j0, j1).
  void probabilities_and_ds(const SeqSpan& s, int64_t b, int64_t hk, int64_t i0, int64_t i1,
                            int64_t j0, int64_t j1, Buffers& w) const {
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
    const int64_t rows = (i1 - i0) * c_.g, nk = j1 - j0;
    const auto& a = c_.args;
    flash::tile_scores(w.qp, rows, w.kp, nk, c_.d, w.p, kLs);
    flash::tile_scores(w.doutp, rows, w.vp, nk, c_.d, w.ds, kLs);
    const float cap = c_.opts.softcap;
    for (int64_t r = 0; r < rows; ++r) {
      float* p = w.p + r * kLs;
      float* ds = w.ds + r * kLs;
      const int64_t i = i0 + r / c_.g;
      if (w.lse[r] == kNegInf) {  // fully masked row: P = 0, no gradient
        std::fill(p, p + nk, 0.0f);
        std::fill(ds, ds + nk, 0.0f);
        continue;
      }
      float* t = cap > 0 ? w.t + r * kLs : nullptr;
      if (t) {
        softcap_inplace(p, nk, cap);
        std::copy_n(p, nk, t);  // the softcap derivative needs t before the bias
      }
      if (c_.has_alibi) {
        const float slope = alibi_slope(a, b, head(hk, r));
        if (slope != 0) flash::alibi_row(p, nk, j0, i + lk - lq, slope);
      }
      flash::mask_row(p, nk, j0, visible_keys(c_.opts, i, lq, lk));
      exp_sub_sum(p, nk, w.lse[r]);
      if (c_.opts.dropout_p > 0) {  // dP ∘= Z; dS needs the undropped P, dV the dropped one
        const float delta = w.delta[r];
        float z[flash::kDropoutChunk];  // one mask draw serves dS and P
        for (int64_t c0 = 0; c0 < nk; c0 += flash::kDropoutChunk) {
          const int64_t m = std::min(flash::kDropoutChunk, nk - c0);
          flash::dropout_factors(z, m, j0 + c0, c_.opts, b, head(hk, r), i);
          for (int64_t j = c0; j < c0 + m; ++j) {
            ds[j] = p[j] * (ds[j] * z[j - c0] - delta);
            p[j] *= z[j - c0];
          }
        }
      } else {
        const float delta = w.delta[r];
        for (int64_t j = 0; j < nk; ++j) ds[j] = p[j] * (ds[j] - delta);
      }
      if (t)
        for (int64_t j = 0; j < nk; ++j) {
          const float th = t[j] / cap;
          ds[j] *= 1.0f - th * th;
        }
    }
  }

  void scatter_add_dq(const SeqSpan& s, int64_t hk, int64_t i0, int64_t i1,
                      const float* dq) const {
    for (int64_t r = 0; r < (i1 - i0) * c_.g; ++r) {
      float* dst = g_.d_q.ptr(s.q_begin + i0 + r / c_.g, head(hk, r));
      const float* src = dq + r * c_.d;
      for (int64_t e = 0; e < c_.d; ++e) dst[e] += src[e];
    }
  }

  const Context& c_;
  const AttentionGrads& g_;
  const float* delta_;  // [H, Tq]
  int64_t positions_;
};

// Δ[h, t] = dO·out per row, and d_sink[h] = -Σ_t exp(b_h - lse[h, t])·Δ[h, t] (ordered sums).
std::vector<float> row_deltas(const Context& c, const AttentionGrads& g) {
  const int64_t tq = c.args.q.shape[0];
  std::vector<float> delta(static_cast<size_t>(c.h * tq));
  parallel_for(c.h, [&](int64_t h) {
    double dsink = 0;
    for (int64_t t = 0; t < tq; ++t) {
      const float d = dot(g.d_out.ptr(t, h), c.args.out.ptr(t, h), c.d);
      delta[size_t(h * tq + t)] = d;
      if (c.has_sink && c.args.lse(h, t) != kNegInf)
        dsink -= std::exp(double(c.args.sink_logits[size_t(h)]) - c.args.lse(h, t)) * d;
    }
    if (c.has_sink) g.d_sink[size_t(h)] = float(dsink);
  });
  return delta;
}

}  // namespace

void flash_attention_backward(const AttentionOptions& opts, const AttentionArgs& args,
                              const AttentionGrads& grads) {
  validate_backward(opts, args, grads);
  check(!args.out.empty() || args.q.numel() == 0, "out: the backward needs the forward's output");
  check(!args.lse.empty() || args.q.numel() == 0, "lse: the backward needs the forward's lse");
  for (const auto* v : {&grads.d_q, &grads.d_k, &grads.d_v})
    check(v->inner_contiguous(), "d_q, d_k, d_v: last dimension must be contiguous");
  const Context c(opts, args);
  const int64_t positions =
      flash::positions_per_tile(FlashTiles::kBwdRowsPerTile, c.g, FlashTiles::kMaxQueryTile);
  const int64_t rows = positions * c.g, kt = FlashTiles::kBwdKeyTile, d = c.d;
  const int64_t rows_pad = flash::round_up(rows, flash::kRowBlock);
  const int64_t packed_tile = flash::packed_keys_size(kt, d);
  const std::vector<float> delta = row_deltas(c, grads);
  const Backward bwd(c, grads, delta.data(), positions);

  const int64_t nseq = num_sequences(args);
  const bool fuse_dq = nseq * c.hkv >= kFusedMinPairs;
  for (int64_t t = 0; t < args.q.shape[0]; ++t)
    for (int64_t h = 0; h < c.h; ++h) std::fill_n(grads.d_q.ptr(t, h), d, 0.0f);

  const size_t bytes = sizeof(float) * size_t(3 * rows * d + 2 * rows_pad * d + 2 * packed_tile +
                                              2 * rows + 3 * rows_pad * kLs + 2 * kt * d) +
                       14 * 64;
  auto& spaces = thread_workspaces(bytes);
  auto buffers = [&]() {
    Workspace& ws = spaces[size_t(thread_index())];
    ws.reset();
    auto f = [&](int64_t n) { return ws.alloc<float>(size_t(n)); };
    return Buffers{f(rows * d),     f(rows * d),        f(rows_pad * d),    f(rows_pad * d),
                   f(packed_tile),  f(packed_tile),     f(rows),            f(rows),
                   f(rows_pad * kLs), f(rows_pad * kLs), f(rows_pad * kLs), f(rows * d),
                   f(kt * d),       f(kt * d)};
  };
  BlasThreadsScope blas(1);
  if (fuse_dq) {  // one item per (sequence, KV head): walks its key tiles in order
    parallel_for(nseq * c.hkv, [&](int64_t idx) {
      Buffers w = buffers();
      const int64_t b = idx / c.hkv, hk = idx % c.hkv;
      const SeqSpan s = sequence_span(args, b);
      for (int64_t j0 = 0; j0 < s.k_end - s.k_begin; j0 += kt)
        bwd.key_tile(b, hk, j0, std::min(j0 + kt, s.k_end - s.k_begin), true, w);
    });
    return;
  }
  struct Item {
    int64_t b, hk, lo, hi;
  };
  std::vector<Item> key_items, query_items;
  for (int64_t b = 0; b < nseq; ++b) {
    const SeqSpan s = sequence_span(args, b);
    for (int64_t hk = 0; hk < c.hkv; ++hk) {
      for (int64_t j0 = 0; j0 < s.k_end - s.k_begin; j0 += kt)
        key_items.push_back({b, hk, j0, std::min(j0 + kt, s.k_end - s.k_begin)});
      for (int64_t i0 = 0; i0 < s.q_end - s.q_begin; i0 += positions)
        query_items.push_back({b, hk, i0, std::min(i0 + positions, s.q_end - s.q_begin)});
    }
  }
  parallel_for(int64_t(key_items.size()), [&](int64_t idx) {
    Buffers w = buffers();
    const Item& it = key_items[size_t(idx)];
    bwd.key_tile(it.b, it.hk, it.lo, it.hi, false, w);
  });
  parallel_for(int64_t(query_items.size()), [&](int64_t idx) {
    Buffers w = buffers();
    const Item& it = query_items[size_t(idx)];
    bwd.query_tile(it.b, it.hk, it.lo, it.hi, w);
  });
}

}  // namespace attnkit
