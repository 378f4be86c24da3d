// Flash attention forward (FlashAttention-2, Dao 2023, Algorithm 1) on OpenBLAS tiles.
// For each (sequence, KV head, query tile) with the G heads stacked: for each visible key tile,
// S = (scale·Q)·Kᵀ; softcap; ALiBi bias; mask; online softmax (running max m, running sum l, rescale O when m
// grows); O += P·V. Finally out = O / l and lse = m + log l. A sink logit b_h starts each row at
// m = b_h, l = 1 (a virtual key with value 0). PyTorch: softmax(q @ k.T * scale + mask) @ v.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/core/workspace.hpp"
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/vec_math.hpp"
#include "flash_common.hpp"

namespace attnkit {
namespace {

using flash::Context;
using flash::kNegInf;

struct QueryTile {
  int64_t b, hk, i0, i1;  // sequence, KV head, query positions [i0, i1) within the sequence
  double cost;            // visible (query, key) pairs: the scheduler runs heavy tiles first
};

struct ForwardState {  // per-thread buffers of one query tile
  float* q;            // [rows, D] scaled queries
  float* o;            // [rows, D] unnormalised output
  float* s;            // [rows, kKeyTile] scores, then probabilities
  float* m;            // [rows] running max
  float* l;            // [rows] running sum
};

class ForwardTile {
 public:
  ForwardTile(const Context& c, const QueryTile& t, ForwardState st)
      : c_(c), t_(t), st_(st), span_(sequence_span(c.args, t.b)),
        lq_(span_.q_end - span_.q_begin), lk_(span_.k_end - span_.k_begin) {}

  void run() {
    const int64_t rows = (t_.i1 - t_.i0) * c_.g;
    flash::gather_rows(c_.args.q, c_, span_.q_begin, t_.hk, t_.i0, t_.i1, c_.scale, st_.q);
    std::fill(st_.o, st_.o + rows * c_.d, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      st_.m[r] = c_.has_sink ? c_.args.sink_logits[size_t(head(r))] : kNegInf;
      st_.l[r] = c_.has_sink ? 1.0f : 0.0f;
    }
    const int64_t lo = vis(t_.i0).lo, hi = vis(t_.i1 - 1).hi;
    for (int64_t j0 = lo; j0 < hi; j0 += FlashTiles::kKeyTile) {
      const int64_t j1 = std::min(j0 + FlashTiles::kKeyTile, hi);
      if (vis(t_.i1 - 1).lo <= j0 && vis(t_.i0).hi >= j1) {
        block(t_.i0, t_.i1, j0, j1, false);  // every query sees every key of the tile
        continue;
      }
      for (int64_t p0 = t_.i0; p0 < t_.i1; p0 += FlashTiles::kDiagonalBlock) {
        const int64_t p1 = std::min(p0 + FlashTiles::kDiagonalBlock, t_.i1);
        const int64_t k0 = std::max(j0, vis(p0).lo), k1 = std::min(j1, vis(p1 - 1).hi);
        if (k0 >= k1) continue;
        block(p0, p1, k0, k1, !(vis(p1 - 1).lo <= k0 && vis(p0).hi >= k1));
      }
    }
    finish(rows);
  }

 private:
  KeyRange vis(int64_t i) const { return visible_keys(c_.opts, i, lq_, lk_); }
  int64_t head(int64_t row) const { return t_.hk * c_.g + row % c_.g; }

  // Online-softmax update of query positions [p0, p1) against keys [k0, k1).
  void block(int64_t p0, int64_t p1, int64_t k0, int64_t k1, bool masked) {
    const int64_t r0 = (p0 - t_.i0) * c_.g, r1 = (p1 - t_.i0) * c_.g, n = k1 - k0;
    const auto& a = c_.args;
    sgemm(false, true, r1 - r0, n, c_.d, 1.0f, st_.q + r0 * c_.d, c_.d,
          a.k.ptr(span_.k_begin + k0, t_.hk), c_.ld(a.k), 0.0f, st_.s, n);
    for (int64_t r = r0; r < r1; ++r) {
      float* x = st_.s + (r - r0) * n;
      const int64_t i = t_.i0 + r / c_.g;
      const flash::RowBias bias{alibi_slope(a, t_.b, head(r)), i + lk_ - lq_};
      if (!flash::online_softmax_row(x, n, c_.opts.softcap, bias, masked, k0, vis(i), st_.m[r],
                                     st_.l[r], st_.o + r * c_.d, c_.d))
        continue;  // nothing visible yet in this row
      if (c_.opts.dropout_p > 0) flash::apply_dropout(x, n, k0, c_.opts, t_.b, head(r), i);
    }
    sgemm(false, false, r1 - r0, c_.d, n, 1.0f, st_.s, n, a.v.ptr(span_.k_begin + k0, t_.hk),
          c_.ld(a.v), 1.0f, st_.o + r0 * c_.d, c_.d);
  }

  void finish(int64_t rows) {
    const auto& a = c_.args;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = t_.i0 + r / c_.g, token = span_.q_begin + i;
      const float l = st_.l[r];
      // A row with no visible key and no sink: zeros and lse = -inf, never NaN.
      const float inv = l > 0 ? 1.0f / l : 0.0f;
      float* out = a.out.ptr(token, head(r));
      const float* o = st_.o + r * c_.d;
      for (int64_t e = 0; e < c_.d; ++e) out[e] = o[e] * inv;
      if (!a.lse.empty()) a.lse(head(r), token) = l > 0 ? st_.m[r] + std::log(l) : kNegInf;
    }
  }

  const Context& c_;
  const QueryTile& t_;
  ForwardState st_;
  SeqSpan span_;
  int64_t lq_, lk_;
};

std::vector<QueryTile> make_tiles(const Context& c, int64_t positions) {
  std::vector<QueryTile> tiles;
  for (int64_t b = 0; b < num_sequences(c.args); ++b) {
    const SeqSpan s = sequence_span(c.args, b);
    const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
    for (int64_t i0 = 0; i0 < lq; i0 += positions) {
      const int64_t i1 = std::min(i0 + positions, lq);
      double cost = 1;  // fixed cost of a tile (gather, finish) even when fully masked
      for (int64_t i = i0; i < i1; ++i) {
        const KeyRange r = visible_keys(c.opts, i, lq, lk);
        cost += double(r.hi - r.lo);
      }
      for (int64_t hk = 0; hk < c.hkv; ++hk) tiles.push_back({b, hk, i0, i1, cost});
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const QueryTile& x, const QueryTile& y) { return x.cost > y.cost; });
  return tiles;
}

}  // namespace

void flash_attention(const AttentionOptions& opts, const AttentionArgs& args) {
  validate(opts, args);
  check(!args.out.empty() || args.q.numel() == 0, "out: the forward needs an output view");
  check(args.out.inner_contiguous(), "out: last dimension must be contiguous");
  const Context c(opts, args);
  const int64_t positions =
      flash::positions_per_tile(FlashTiles::kRowsPerTile, c.g, FlashTiles::kMaxQueryTile);
  const auto tiles = make_tiles(c, positions);
  const int64_t rows = positions * c.g;
  const size_t bytes =
      sizeof(float) * size_t(2 * rows * c.d + rows * FlashTiles::kKeyTile + 2 * rows) + 5 * 64;
  auto& spaces = thread_workspaces(bytes);
  BlasThreadsScope blas(1);
  parallel_for(int64_t(tiles.size()), [&](int64_t idx) {
    Workspace& ws = spaces[size_t(thread_index())];
    ws.reset();
    ForwardState st{ws.alloc<float>(size_t(rows * c.d)), ws.alloc<float>(size_t(rows * c.d)),
                    ws.alloc<float>(size_t(rows * FlashTiles::kKeyTile)),
                    ws.alloc<float>(size_t(rows)), ws.alloc<float>(size_t(rows))};
    ForwardTile(c, tiles[size_t(idx)], st).run();
  });
}

}  // namespace attnkit
