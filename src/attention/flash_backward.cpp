// Flash attention backward (FlashAttention-2, Dao 2023, Algorithm 2).
// From the forward: P = exp(t + bias - lse) with t = softcap(scale·q·kᵀ) and the constant ALiBi
// bias, out = (P∘Z)·v (Z = dropout).
// Then Δ_i = dO_i·out_i, dV = (P∘Z)ᵀ·dO, dP = Z∘(dO·Vᵀ), dS = P∘(dP - Δ)∘(1 - (t/c)²),
// dK = dSᵀ·(scale·Q), dQ = scale·dS·K, and for sinks d b_h = -Σ_i exp(b_h - lse_i)·Δ_i.
// Work items are (sequence, KV head, key tile); each owns its rows of dK/dV, which it sums over
// the G stacked query heads (no H-sized temporary). dQ needs a sum over key tiles: when there are
// enough (sequence, KV head) pairs, one item takes a whole pair: it loads the pair's Q and dO once,
// walks all key tiles in order and sums dQ in a buffer of the pair's rows (5 products per block);
// otherwise a second pass over query tiles recomputes dS for dQ (7 products). The choice depends
// on the shape only, never on the thread count.
// The five products run on attnkit's packed micro-kernels (flash_tile_kernels.hpp): Q and dO
// panel-packed once per load, K and V of a key tile packed once per key tile, P and dS read in
// place for the transposed products. FlashProductsScope(blas) runs all five on OpenBLAS sgemm.
// PyTorch: torch.autograd.grad of softmax(q @ k.T * scale + mask) @ v.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
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
using flash::kMinItemCost;
using flash::kNegInf;
constexpr int64_t kLs = flash::kBwdScoreStride;  // row stride of P, dS and t
constexpr int64_t kFusedMinPairs = 8;            // (sequence, KV head) pairs needed to fuse dQ
// Floats a fused item may hold for its pair's Q, dO and dQ; longer sequences take the two passes.
constexpr int64_t kFusedBudget = int64_t(1) << 24;
// Stacked rows per sub-block where the mask cuts a block: 48 ran the causal backward at L 256 and
// L 2048 about 2 % faster than 96 and level at L 4096 (AMX Xeon, 2026-12-08).
constexpr int64_t kDiagonalRows = 48;

// Query positions per block: about kBwdRowsPerTile stacked rows, and a whole number of row blocks
// (so a pair's packed rows split into blocks on row-block boundaries).
int64_t block_positions(int64_t g) {
  const int64_t step = flash::kRowBlock / std::gcd(g, flash::kRowBlock);
  const int64_t p =
      flash::positions_per_tile(FlashTiles::kBwdRowsPerTile, g, FlashTiles::kMaxQueryTile);
  return std::max(step, p / step * step);
}

struct QueryRows {  // rows [0, n) = positions [i0, i0 + n/G) × G of one pair, position-major
  int64_t i0 = 0, n = 0, stride = 0;  // stride: panel stride of q and dout (packed layout)
  float* q;      // scale·Q: packed [ceil(D/NV), n_pad, NV] (pad rows zero); blas [n, D]
  float* dout;   // dO, same layout
  float* lse;    // [n]
  float* delta;  // [n] Δ
  float* dq;     // [n_pad, ldo] Σ dS·K over key tiles (scaled when written out)
};

struct KeyBlock {  // one key tile of one pair
  int64_t j0 = 0, j1 = 0;
  float* kp;  // K as Kᵀ panels (flash::pack_keys), packed path
  float* vp;  // V as Kᵀ panels
  float* kc;  // K panel-packed [ceil(D/NV), j1 - j0, NV]
  float* dk;  // [round_up(kBwdKeyTile, MR), ldo]
  float* dv;
};

struct Scratch {  // [rows_pad, kLs] each
  float* p;       // probabilities (P∘Z after probabilities_and_ds)
  float* ds;      // dP, then dS
  float* t;       // softcapped scores before ALiBi (softcap only)
};

struct Buffers {
  QueryRows rows;
  KeyBlock keys;
  Scratch sc;
};

// Sizes of one thread's Buffers, and carving them from its workspace.
struct BufferPlan {
  int64_t row_cap;     // rows a QueryRows holds: a whole pair when fused, one block otherwise
  int64_t block_rows;  // rows of P, dS and t
  int64_t d, ldo;
  bool packed;

  size_t bytes() const { return sizeof(float) * size_t(floats()) + 13 * 64; }

  Buffers take(Workspace& ws) const {
    ws.reset();
    auto f = [&](int64_t n) { return ws.alloc<float>(size_t(n)); };
    Buffers w;
    w.rows.q = f(row_cap * flash::padded_dim(d));
    w.rows.dout = f(row_cap * flash::padded_dim(d));
    w.rows.lse = f(row_cap);
    w.rows.delta = f(row_cap);
    w.rows.dq = f(row_cap * ldo);
    w.keys.kp = packed ? f(flash::packed_keys_size(kKeyTile, d)) : nullptr;
    w.keys.vp = packed ? f(flash::packed_keys_size(kKeyTile, d)) : nullptr;
    w.keys.kc = packed ? f(kKeyTile * flash::padded_dim(d)) : nullptr;
    w.keys.dk = f(key_rows() * ldo);
    w.keys.dv = f(key_rows() * ldo);
    w.sc = {f(block_rows * kLs), f(block_rows * kLs), f(block_rows * kLs)};
    return w;
  }

 private:
  static constexpr int64_t kKeyTile = FlashTiles::kBwdKeyTile;
  static int64_t key_rows() { return flash::round_up(kKeyTile, flash::kRowBlock); }
  int64_t floats() const {
    return 3 * row_cap * flash::padded_dim(d) + 2 * row_cap +
           (packed ? 2 * flash::packed_keys_size(kKeyTile, d) + kKeyTile * flash::padded_dim(d)
                   : 0) +
           2 * key_rows() * ldo + 3 * block_rows * kLs;
  }
};

class Backward {
 public:
  // delta: Δ [H, Tq] precomputed (row_deltas), or null: each load of query rows forms its rows'
  // Δ as it reads their dO (the fused path, which loads every row once), and writes them to
  // delta_out [H, Tq] if that is given (for the sinks' gradient).
  // nonfinite: null, or set when a packing finds NaN or inf in q, dO, k or v (the fused packed
  // path, which packs every element once, checks the inputs that way).
  Backward(const Context& c, const AttentionGrads& g, const float* delta, float* delta_out,
           int64_t positions, bool packed, std::atomic<bool>* nonfinite)
      : c_(c), g_(g), delta_(delta), delta_out_(delta_out), positions_(positions),
        packed_(packed), ldo_(packed ? flash::padded_dim(c.d) : c.d), nonfinite_(nonfinite) {}

  int64_t ldo() const { return ldo_; }

  // dK, dV, dQ of one (sequence, KV head) pair: w.rows is sized for all its query positions.
  void pair(int64_t b, int64_t hk, Buffers& w) const {
    const SeqSpan s = sequence_span(c_.args, b);
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
    load_rows(s, b, hk, 0, lq, w.rows);
    for (int64_t j0 = 0; j0 < lk; j0 += FlashTiles::kBwdKeyTile) {
      load_keys(s, hk, j0, std::min(j0 + FlashTiles::kBwdKeyTile, lk), w.keys);
      sweep(s, b, hk, w.rows, w.keys, true, w.sc);
      store_keys(s, hk, w.keys);
    }
    store_dq(s, hk, w.rows);
  }

  // dK, dV of keys [j0, j1) of KV head hk in sequence b, loading query rows block by block.
  void key_tile(int64_t b, int64_t hk, int64_t j0, int64_t j1, Buffers& w) const {
    const SeqSpan s = sequence_span(c_.args, b);
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
    load_keys(s, hk, j0, j1, w.keys);
    for (int64_t i0 = first_position(0, lq, j0, lq, lk); i0 < lq; i0 += positions_) {
      const int64_t i1 = std::min(i0 + positions_, lq);
      if (visible_keys(c_.opts, i0, lq, lk).lo >= j1) break;  // this block and every later one
      load_rows(s, b, hk, i0, i1, w.rows);
      sweep(s, b, hk, w.rows, w.keys, false, w.sc);
    }
    store_keys(s, hk, w.keys);
  }

  // dQ of query positions [i0, i1) of KV group hk in sequence b (the unfused second pass).
  void query_tile(int64_t b, int64_t hk, int64_t i0, int64_t i1, Buffers& w) const {
    const SeqSpan s = sequence_span(c_.args, b);
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
    const int64_t lo = visible_keys(c_.opts, i0, lq, lk).lo / FlashTiles::kBwdKeyTile *
                       FlashTiles::kBwdKeyTile;
    const int64_t hi = visible_keys(c_.opts, i1 - 1, lq, lk).hi;
    load_rows(s, b, hk, i0, i1, w.rows);
    for (int64_t j0 = lo; j0 < hi; j0 += FlashTiles::kBwdKeyTile) {
      load_keys(s, hk, j0, std::min(j0 + FlashTiles::kBwdKeyTile, lk), w.keys);
      block(s, b, hk, w.rows, 0, w.rows.n, w.keys, false, true, w.sc);
    }
    store_dq(s, hk, w.rows);
  }

 private:
  int64_t head(int64_t hk, int64_t row) const { return hk * c_.g + row % c_.g; }

  // The first position of [i0, i1) at or after which positions see keys at or past j0, rounded
  // down to a whole number of row blocks from i0 (visible ranges only move right with i).
  int64_t first_position(int64_t i0, int64_t i1, int64_t j0, int64_t lq, int64_t lk) const {
    int64_t lo = i0, hi = i1;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (visible_keys(c_.opts, mid, lq, lk).hi <= j0) lo = mid + 1; else hi = mid;
    }
    return i0 + (lo - i0) / row_step() * row_step();
  }
  int64_t row_step() const { return flash::kRowBlock / std::gcd(c_.g, flash::kRowBlock); }

  // The blocks of q's rows that see keys of kb (q spans whole blocks of positions_ from q.i0).
  void sweep(const SeqSpan& s, int64_t b, int64_t hk, const QueryRows& q, const KeyBlock& kb,
             bool with_dq, const Scratch& sc) const {
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
    const int64_t i_end = q.i0 + q.n / c_.g;
    for (int64_t i0 = first_position(q.i0, i_end, kb.j0, lq, lk); i0 < i_end; i0 += positions_) {
      const int64_t i1 = std::min(i0 + positions_, i_end);
      if (visible_keys(c_.opts, i0, lq, lk).lo >= kb.j1) break;
      // A block the mask cuts through goes in sub-blocks, each computing only the key panels
      // its last position sees.
      const bool whole = visible_keys(c_.opts, i0, lq, lk).hi >= kb.j1 &&
                         visible_keys(c_.opts, i1 - 1, lq, lk).lo <= kb.j0;
      const int64_t step = whole ? positions_ : diagonal_positions();
      for (int64_t p0 = i0; p0 < i1; p0 += step)
        block(s, b, hk, q, (p0 - q.i0) * c_.g, (std::min(p0 + step, i1) - q.i0) * c_.g, kb, true,
              with_dq, sc);
    }
  }

  // Positions per sub-block where the mask cuts a block: about 48 rows, whole row blocks.
  int64_t diagonal_positions() const {
    return std::max(row_step(), kDiagonalRows / c_.g / row_step() * row_step());
  }

  // Rows [r0, r1) of q against the keys of kb: S, dP, then dV, dK (with_dkdv) and dQ (with_dq).
  // Keys past the last one the block's final position sees are left out, a key panel at a time.
  void block(const SeqSpan& s, int64_t b, int64_t hk, const QueryRows& q, int64_t r0, int64_t r1,
             const KeyBlock& kb, bool with_dkdv, bool with_dq, const Scratch& sc) const {
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin, d = c_.d;
    const int64_t last = q.i0 + (r1 - 1) / c_.g;
    const int64_t seen = visible_keys(c_.opts, last, lq, lk).hi - kb.j0;
    if (seen <= 0) return;
    const int64_t nk = kb.j1 - kb.j0, n = std::min(nk, flash::round_up(seen, flash::kKeyPanel));
    const int64_t rows = r1 - r0;
    const auto& a = c_.args;
    const float* k = a.k.ptr(s.k_begin + kb.j0, hk);
    if (packed_) {
      flash::tile_scores_panels(q.q + r0 * flash::kValuePanel, q.stride, rows, kb.kp, n, d, sc.p,
                                kLs);
      flash::tile_scores_panels(q.dout + r0 * flash::kValuePanel, q.stride, rows, kb.vp, n, d,
                                sc.ds, kLs);
      // tile_accumulate_transposed reads P and dS up to column round_up(n, MR), past the panels
      // written (round_up(n, NK)) for some n: zeros there (their products are never stored).
      const int64_t written = flash::round_up(n, flash::kKeyPanel);
      const int64_t read = flash::round_up(n, flash::kRowBlock);
      if (read > written)
        for (int64_t r = 0; r < flash::round_up(rows, flash::kRowBlock); ++r) {
          std::fill(sc.p + r * kLs + written, sc.p + r * kLs + read, 0.0f);
          std::fill(sc.ds + r * kLs + written, sc.ds + r * kLs + read, 0.0f);
        }
    } else {
      sgemm(false, true, rows, n, d, 1.0f, q.q + r0 * d, d, k, c_.ld(a.k), 0.0f, sc.p, kLs);
      sgemm(false, true, rows, n, d, 1.0f, q.dout + r0 * d, d, a.v.ptr(s.k_begin + kb.j0, hk),
            c_.ld(a.v), 0.0f, sc.ds, kLs);
    }
    probabilities_and_ds(s, b, hk, q, r0, r1, kb.j0, n, sc);
    if (with_dkdv) {  // dV += (P∘Z)ᵀ·dO, dK += dSᵀ·(scale·Q)
      if (packed_) {
        flash::tile_accumulate_transposed(sc.p, n, rows, q.dout + r0 * flash::kValuePanel,
                                          q.stride, d, kb.dv, ldo_);
        flash::tile_accumulate_transposed(sc.ds, n, rows, q.q + r0 * flash::kValuePanel,
                                          q.stride, d, kb.dk, ldo_);
      } else {
        sgemm(true, false, n, d, rows, 1.0f, sc.p, kLs, q.dout + r0 * d, d, 1.0f, kb.dv, ldo_);
        sgemm(true, false, n, d, rows, 1.0f, sc.ds, kLs, q.q + r0 * d, d, 1.0f, kb.dk, ldo_);
      }
    }
    if (with_dq) {  // dQ += dS·K (scale applied in store_dq)
      if (packed_)
        flash::tile_accumulate_rows(sc.ds, rows, kb.kc, nk * flash::kValuePanel, n, d,
                                    q.dq + r0 * ldo_, ldo_);
      else
        sgemm(false, false, rows, d, n, 1.0f, sc.ds, kLs, k, c_.ld(a.k), 1.0f, q.dq + r0 * ldo_,
              ldo_);
    }
  }

  // q = positions [i0, i1) of pair (b, hk): scale·Q and dO in the path's layout, lse, Δ, dQ = 0.
  void load_rows(const SeqSpan& s, int64_t b, int64_t hk, int64_t i0, int64_t i1,
                 QueryRows& q) const {
    (void)b;
    const int64_t n = (i1 - i0) * c_.g, n_pad = flash::round_up(n, flash::kRowBlock);
    q.i0 = i0;
    q.n = n;
    q.stride = n_pad * flash::kValuePanel;
    const int64_t tq = c_.args.q.shape[0];
    for (int64_t r = 0; r < n; ++r) {
      const int64_t token = s.q_begin + i0 + r / c_.g, h = head(hk, r);
      const float* qs = c_.args.q.ptr(token, h);
      const float* ds = g_.d_out.ptr(token, h);
      if (packed_) {
        const bool finite =
            flash::pack_panel_row(qs, c_.scale, c_.d, q.q + r * flash::kValuePanel, q.stride) &
            flash::pack_panel_row(ds, 1.0f, c_.d, q.dout + r * flash::kValuePanel, q.stride);
        if (!finite) note_nonfinite();
      } else {
        for (int64_t e = 0; e < c_.d; ++e) q.q[r * c_.d + e] = c_.scale * qs[e];
        std::copy_n(ds, c_.d, q.dout + r * c_.d);
      }
      q.lse[r] = c_.args.lse(h, token);
      if (delta_) {
        q.delta[r] = delta_[h * tq + token];
      } else {
        q.delta[r] = dot(ds, c_.args.out.ptr(token, h), c_.d);
        if (delta_out_) delta_out_[h * tq + token] = q.delta[r];
      }
    }
    if (packed_)  // zero pad rows: the score kernels read whole row blocks
      for (float* x : {q.q, q.dout}) flash::zero_panel_rows(x, q.stride, n, n_pad, c_.d);
    std::fill(q.dq, q.dq + n_pad * ldo_, 0.0f);
  }

  // kb = keys [j0, j1) of KV head hk: packed K and V (packed path), dK = dV = 0.
  void load_keys(const SeqSpan& s, int64_t hk, int64_t j0, int64_t j1, KeyBlock& kb) const {
    const auto& a = c_.args;
    kb.j0 = j0;
    kb.j1 = j1;
    if (packed_) {
      const bool finite =
          flash::pack_keys(a.k.ptr(s.k_begin + j0, hk), c_.ld(a.k), j1 - j0, c_.d, kb.kp) &
          flash::pack_keys(a.v.ptr(s.k_begin + j0, hk), c_.ld(a.v), j1 - j0, c_.d, kb.vp);
      flash::pack_values(a.k.ptr(s.k_begin + j0, hk), c_.ld(a.k), j1 - j0, c_.d, kb.kc);
      if (!finite) note_nonfinite();
    }
    std::fill(kb.dk, kb.dk + (j1 - j0) * ldo_, 0.0f);
    std::fill(kb.dv, kb.dv + (j1 - j0) * ldo_, 0.0f);
  }

  void store_keys(const SeqSpan& s, int64_t hk, const KeyBlock& kb) const {
    for (int64_t j = 0; j < kb.j1 - kb.j0; ++j) {
      std::copy_n(kb.dk + j * ldo_, c_.d, g_.d_k.ptr(s.k_begin + kb.j0 + j, hk));
      std::copy_n(kb.dv + j * ldo_, c_.d, g_.d_v.ptr(s.k_begin + kb.j0 + j, hk));
    }
  }

  void store_dq(const SeqSpan& s, int64_t hk, const QueryRows& q) const {
    for (int64_t r = 0; r < q.n; ++r) {
      float* dst = g_.d_q.ptr(s.q_begin + q.i0 + r / c_.g, head(hk, r));
      const float* src = q.dq + r * ldo_;
      for (int64_t e = 0; e < c_.d; ++e) dst[e] = c_.scale * src[e];
    }
  }

  // sc.p = P∘Z and sc.ds = dS for rows [r0, r1) of q against keys [j0, j0 + nk); on entry they
  // hold S and dP.
  void probabilities_and_ds(const SeqSpan& s, int64_t b, int64_t hk, const QueryRows& q,
                            int64_t r0, int64_t r1, int64_t j0, int64_t nk,
                            const Scratch& sc) const {
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
    const auto& a = c_.args;
    const float cap = c_.opts.softcap;
    for (int64_t r = r0; r < r1; ++r) {
      float* p = sc.p + (r - r0) * kLs;
      float* ds = sc.ds + (r - r0) * kLs;
      const int64_t i = q.i0 + r / c_.g;
      if (q.lse[r] == kNegInf) {  // fully masked row: P = 0, no gradient
        std::fill(p, p + nk, 0.0f);
        std::fill(ds, ds + nk, 0.0f);
        continue;
      }
      float* t = cap > 0 ? sc.t + (r - r0) * kLs : nullptr;
      if (t) {
        softcap_inplace(p, nk, cap);
        std::copy_n(p, nk, t);  // the softcap derivative needs t before the bias
      }
      if (c_.has_alibi) {
        const float slope = alibi_slope(a, b, head(hk, r));
        if (slope != 0) flash::alibi_row(p, nk, j0, i + lk - lq, slope);
      }
      flash::mask_row(p, nk, j0, visible_keys(c_.opts, i, lq, lk));
      (packed_ ? flash::tile_exp_sum : exp_sub_sum)(p, nk, q.lse[r]);  // as the forward's P
      const float delta = q.delta[r];
      if (c_.opts.dropout_p > 0) {  // dP ∘= Z; dS needs the undropped P, dV the dropped one
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
        for (int64_t j = 0; j < nk; ++j) ds[j] = p[j] * (ds[j] - delta);
      }
      if (t)
        for (int64_t j = 0; j < nk; ++j) {
          const float th = t[j] / cap;
          ds[j] *= 1.0f - th * th;
        }
    }
  }

  const Context& c_;
  const AttentionGrads& g_;
  const float* delta_;  // [H, Tq], or null (formed by load_rows)
  float* delta_out_;    // [H, Tq] or null: where load_rows leaves the Δ it forms
  int64_t positions_;
  bool packed_;
  int64_t ldo_;                   // row stride of dQ, dK and dV buffers
  std::atomic<bool>* nonfinite_;  // or null: the inputs were checked before

  void note_nonfinite() const {
    if (nonfinite_) nonfinite_->store(true, std::memory_order_relaxed);
  }
};

// Δ[h, t] = dO·out per row.
std::vector<float> row_deltas(const Context& c, const AttentionGrads& g) {
  const int64_t tq = c.args.q.shape[0];
  std::vector<float> delta(static_cast<size_t>(c.h * tq));
  parallel_for(c.h, [&](int64_t h) {
    for (int64_t t = 0; t < tq; ++t)
      delta[size_t(h * tq + t)] = dot(g.d_out.ptr(t, h), c.args.out.ptr(t, h), c.d);
  });
  return delta;
}

// d_sink[h] = -Σ_t exp(b_h - lse[h, t])·Δ[h, t] (ordered sums in double).
void sink_gradients(const Context& c, const AttentionGrads& g, const std::vector<float>& delta) {
  const int64_t tq = c.args.q.shape[0];
  parallel_for(c.h, [&](int64_t h) {
    double dsink = 0;
    for (int64_t t = 0; t < tq; ++t)
      if (c.args.lse(h, t) != kNegInf)
        dsink -= std::exp(double(c.args.sink_logits[size_t(h)]) - c.args.lse(h, t)) *
                 delta[size_t(h * tq + t)];
    g.d_sink[size_t(h)] = float(dsink);
  });
}

}  // namespace

void flash_attention_backward(const AttentionOptions& opts, const AttentionArgs& args,
                              const AttentionGrads& grads) {
  // The fused packed schedule (chosen below from the shape) packs every element of q, dO, k and
  // v once and checks them for NaN and inf as it does; the other schedules scan them first.
  const bool packed = flash_products() != FlashProducts::blas;
  validate_backward_layout(opts, args, grads);
  check(!args.out.empty() || args.q.numel() == 0, "out: the backward needs the forward's output");
  check(!args.lse.empty() || args.q.numel() == 0, "lse: the backward needs the forward's lse");
  for (const auto* v : {&grads.d_q, &grads.d_k, &grads.d_v})
    check(v->inner_contiguous(), "d_q, d_k, d_v: last dimension must be contiguous");
  const Context c(opts, args);
  const int64_t positions = block_positions(c.g);
  const int64_t kt = FlashTiles::kBwdKeyTile, d = c.d, mr = flash::kRowBlock;
  const int64_t ldo = packed ? flash::padded_dim(d) : d;
  const int64_t nseq = num_sequences(args);
  int64_t longest = 0;  // query positions of the longest sequence
  for (int64_t b = 0; b < nseq; ++b) {
    const SeqSpan s = sequence_span(args, b);
    longest = std::max(longest, s.q_end - s.q_begin);
  }
  const int64_t pair_rows = flash::round_up(longest * c.g, mr);
  const bool fuse_dq =
      nseq * c.hkv >= kFusedMinPairs && 3 * pair_rows * flash::padded_dim(d) <= kFusedBudget;
  const bool check_while_packing = packed && fuse_dq;
  if (!check_while_packing) check_backward_inputs_finite(args, grads);
  std::atomic<bool> nonfinite{false};
  // Rows a QueryRows holds: a whole pair when fused, one block of positions otherwise. A block
  // holds at most min(positions, longest) positions: short sequences (a ViT's patches) get small
  // buffers.
  const int64_t block_rows = flash::round_up(std::min(positions, longest) * c.g, mr);
  const BufferPlan plan{fuse_dq ? pair_rows : block_rows, block_rows, d, ldo, packed};
  // Δ = rowsum(dO∘out): formed by the fused path as it loads each row (once), which saves a pass
  // over dO and out; the two-pass path loads rows once per key tile, so it takes them from a
  // first pass (row_deltas).
  std::vector<float> delta;
  if (fuse_dq) {
    if (c.has_sink) delta.resize(size_t(c.h * args.q.shape[0]));
  } else {
    delta = row_deltas(c, grads);
  }
  const Backward bwd(c, grads, fuse_dq ? nullptr : delta.data(),
                     fuse_dq && c.has_sink ? delta.data() : nullptr, positions, packed,
                     check_while_packing ? &nonfinite : nullptr);
  auto& spaces = thread_workspaces(plan.bytes());
  auto buffers = [&]() { return plan.take(spaces[size_t(thread_index())]); };
  BlasThreadsScope blas(1);
  // Items of tiny sequences (a ViT's 16 patches) run in groups of at least kMinItemCost
  // query-key pairs (parallel_for_grouped); an item's cost is its query rows times its keys.
  if (fuse_dq) {  // one item per (sequence, KV head): walks its key tiles in order
    const auto pair_cost = [&](int64_t idx) {
      const SeqSpan s = sequence_span(args, idx / c.hkv);
      return double((s.q_end - s.q_begin) * c.g) * double(s.k_end - s.k_begin);
    };
    parallel_for_grouped(nseq * c.hkv, pair_cost, kMinItemCost, [&](int64_t idx) {
      Buffers w = buffers();
      bwd.pair(idx / c.hkv, idx % c.hkv, w);
    });
    if (nonfinite.load()) {
      check_backward_inputs_finite(args, grads);  // throws, naming the first NaN or inf
      check(false, "q, k, v or d_out: non-finite value");
    }
    if (c.has_sink) sink_gradients(c, grads, delta);
    return;
  }
  struct Item {
    int64_t b, hk, lo, hi;
    double cost;
  };
  std::vector<Item> key_items, query_items;
  for (int64_t b = 0; b < nseq; ++b) {
    const SeqSpan s = sequence_span(args, b);
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
    for (int64_t hk = 0; hk < c.hkv; ++hk) {
      for (int64_t j0 = 0; j0 < lk; j0 += kt) {
        const int64_t j1 = std::min(j0 + kt, lk);
        key_items.push_back({b, hk, j0, j1, double(j1 - j0) * double(lq * c.g)});
      }
      for (int64_t i0 = 0; i0 < lq; i0 += positions) {
        const int64_t i1 = std::min(i0 + positions, lq);
        query_items.push_back({b, hk, i0, i1, double((i1 - i0) * c.g) * double(lk)});
      }
    }
  }
  const auto run_items = [&](const std::vector<Item>& items, auto tile) {
    parallel_for_grouped(
        int64_t(items.size()), [&](int64_t idx) { return items[size_t(idx)].cost; }, kMinItemCost,
        [&](int64_t idx) {
          Buffers w = buffers();
          const Item& it = items[size_t(idx)];
          (bwd.*tile)(it.b, it.hk, it.lo, it.hi, w);
        });
  };
  run_items(key_items, &Backward::key_tile);
  run_items(query_items, &Backward::query_tile);
  if (c.has_sink) sink_gradients(c, grads, delta);
}

}  // namespace attnkit
