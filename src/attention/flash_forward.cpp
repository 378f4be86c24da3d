// Flash attention forward (FlashAttention-2, Dao 2023, Algorithm 1).
// For each (sequence, KV head, query tile) with the G heads stacked: for each visible key tile,
// S = (scale·Q)·Kᵀ; softcap; ALiBi bias; mask; online softmax (running max m, running sum l, rescale O when m
// grows); O += P·V. Finally out = O / l and lse = m + log l. A sink logit b_h starts each row at
// m = b_h, l = 1 (a virtual key with value 0). PyTorch: softmax(q @ k.T * scale + mask) @ v.
// The two products run on attnkit's packed micro-kernels (flash_tile_kernels.hpp: K and V packed
// once per (sequence, KV head), shared by all its query tiles); OpenBLAS sgemm on each tile
// remains as a forced alternative (FlashProductsScope) for comparison.
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

struct QueryTile {
  int64_t b, hk, i0, i1;  // sequence, KV head, query positions [i0, i1) within the sequence
  double cost;            // visible (query, key) pairs: the scheduler runs heavy tiles first
};

// Rows per group in a packed block: 4 row blocks on AVX-512, 8 on AVX2.
constexpr int64_t kRowGroup = 48;
static_assert(kRowGroup % flash::kRowBlock == 0);

thread_local FlashProducts forced_products = FlashProducts::automatic;

// Whether the forward runs on the packed micro-kernels: always, unless a FlashProductsScope
// forces OpenBLAS. They measured faster for every head dimension tried (D 8 to 256, AVX-512 and
// AVX2; docs/performance-data.md), so the choice never depends on the shape or the thread count.
bool use_packed_kernels() { return forced_products != FlashProducts::blas; }

// Packed Kᵀ and V of one (sequence, KV head) for the packed path; null on the OpenBLAS path.
struct PackedHead {
  const float* k = nullptr;  // flash::pack_keys layout, all keys of the sequence
  const float* v = nullptr;  // flash::pack_values layout
};

struct ForwardState {  // per-thread buffers of one query tile
  float* q;            // [rows, D] scaled queries (OpenBLAS path)
  float* qp;           // panel-packed scaled queries, row blocks padded with zeros (packed path)
  int64_t qp_stride;   // panel stride of qp: rows rounded up to a row block, times kValuePanel
  float* o;            // [rows, ldo] unnormalised output
  float* s;            // [rows, score stride] scores, then probabilities
  float* m;            // [rows] running max
  float* l;            // [rows] running sum
};

class ForwardTile {
 public:
  ForwardTile(const Context& c, const QueryTile& t, ForwardState st, PackedHead packed)
      : c_(c), t_(t), st_(st), packed_(packed), span_(sequence_span(c.args, t.b)),
        lq_(span_.q_end - span_.q_begin), lk_(span_.k_end - span_.k_begin),
        ldo_(packed.k ? flash::padded_dim(c.d) : c.d) {}

  // Returns whether the tile's queries were finite (checked while packing them; the OpenBLAS
  // path's caller has checked q already).
  bool run() {
    const int64_t rows = (t_.i1 - t_.i0) * c_.g;
    bool finite = true;
    if (packed_.k)
      finite = pack_queries(rows);
    else
      flash::gather_rows(c_.args.q, c_, span_.q_begin, t_.hk, t_.i0, t_.i1, c_.scale, st_.q);
    std::fill(st_.o, st_.o + rows * ldo_, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      st_.m[r] = c_.has_sink ? c_.args.sink_logits[size_t(head(r))] : kNegInf;
      st_.l[r] = c_.has_sink ? 1.0f : 0.0f;
    }
    // The packed kernels start key ranges on a panel (the extra keys are masked) and masked
    // sub-blocks on a row block.
    const int64_t align = packed_.k ? flash::kKeyPanel : 1;
    const int64_t diagonal = packed_.k ? flash::kPackedDiagonalBlock : FlashTiles::kDiagonalBlock;
    const int64_t lo = vis(t_.i0).lo / align * align, hi = vis(t_.i1 - 1).hi;
    for (int64_t j0 = lo; j0 < hi; j0 += FlashTiles::kKeyTile) {
      const int64_t j1 = std::min(j0 + FlashTiles::kKeyTile, hi);
      if (vis(t_.i1 - 1).lo <= j0 && vis(t_.i0).hi >= j1) {
        block(t_.i0, t_.i1, j0, j1, false);  // every query sees every key of the tile
        continue;
      }
      for (int64_t p0 = t_.i0; p0 < t_.i1; p0 += diagonal) {
        const int64_t p1 = std::min(p0 + diagonal, t_.i1);
        const int64_t k0 = std::max(j0, vis(p0).lo / align * align);
        const int64_t k1 = std::min(j1, vis(p1 - 1).hi);
        if (k0 >= k1) continue;
        block(p0, p1, k0, k1, !(vis(p1 - 1).lo <= k0 && vis(p0).hi >= k1));
      }
    }
    finish(rows);
    return finite;
  }

 private:
  KeyRange vis(int64_t i) const { return visible_keys(c_.opts, i, lq_, lk_); }

  // Scaled query rows straight from q into the panel layout, the last row block's extra rows
  // zeroed (the score kernel computes them and drops them); returns whether q's rows were finite.
  bool pack_queries(int64_t rows) {
    bool finite = true;
    for (int64_t r = 0; r < rows; ++r)
      finite &= flash::pack_panel_row(c_.args.q.ptr(span_.q_begin + t_.i0 + r / c_.g, head(r)),
                                      c_.scale, c_.d, st_.qp + r * flash::kValuePanel,
                                      st_.qp_stride);
    flash::zero_panel_rows(st_.qp, st_.qp_stride, rows, flash::round_up(rows, flash::kRowBlock),
                           c_.d);
    return finite;
  }
  int64_t head(int64_t row) const { return t_.hk * c_.g + row % c_.g; }

  // Online-softmax update of query positions [p0, p1) against keys [k0, k1). The packed path
  // goes through the rows in groups of kRowGroup, so a group's scores stay in L1/L2 from the
  // score kernel through the softmax to the P·V kernel.
  void block(int64_t p0, int64_t p1, int64_t k0, int64_t k1, bool masked) {
    const int64_t r0 = (p0 - t_.i0) * c_.g, r1 = (p1 - t_.i0) * c_.g, n = k1 - k0;
    const auto& a = c_.args;
    if (!packed_.k) {
      sgemm(false, true, r1 - r0, n, c_.d, 1.0f, st_.q + r0 * c_.d, c_.d,
            a.k.ptr(span_.k_begin + k0, t_.hk), c_.ld(a.k), 0.0f, st_.s, n);
      softmax_rows(r0, r1, n, k0, masked, n);
      sgemm(false, false, r1 - r0, c_.d, n, 1.0f, st_.s, n, a.v.ptr(span_.k_begin + k0, t_.hk),
            c_.ld(a.v), 1.0f, st_.o + r0 * ldo_, ldo_);
      return;
    }
    for (int64_t g0 = r0; g0 < r1; g0 += kRowGroup) {
      const int64_t g1 = std::min(g0 + kRowGroup, r1);
      flash::tile_scores_panels(st_.qp + g0 * flash::kValuePanel, st_.qp_stride, g1 - g0,
                                packed_.k + k0 * c_.d, n, c_.d, st_.s, flash::kScoreStride);
      softmax_rows(g0, g1, n, k0, masked, flash::kScoreStride);
      flash::tile_accumulate(st_.s, g1 - g0, packed_.v, lk_, k0, n, c_.d, st_.o + g0 * ldo_);
    }
  }

  // Online softmax of rows [r0, r1) whose scores against keys [k0, k0 + n) are at st_.s (row
  // stride ls); leaves P (with dropout) in their place.
  void softmax_rows(int64_t r0, int64_t r1, int64_t n, int64_t k0, bool masked, int64_t ls) {
    const auto& a = c_.args;
    for (int64_t r = r0; r < r1; ++r) {
      float* x = st_.s + (r - r0) * ls;
      const int64_t i = t_.i0 + r / c_.g;
      const flash::RowBias bias{alibi_slope(a, t_.b, head(r)), i + lk_ - lq_};
      if (!flash::online_softmax_row(x, n, c_.opts.softcap, bias, masked, k0, vis(i), st_.m[r],
                                     st_.l[r], st_.o + r * ldo_, c_.d,
                                     packed_.k ? flash::tile_exp_sum : exp_sub_sum))
        continue;  // nothing visible yet in this row
      if (c_.opts.dropout_p > 0) flash::apply_dropout(x, n, k0, c_.opts, t_.b, head(r), i);
    }
  }

  void finish(int64_t rows) {
    const auto& a = c_.args;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = t_.i0 + r / c_.g, token = span_.q_begin + i;
      const float l = st_.l[r];
      // A row with no visible key and no sink: zeros and lse = -inf, never NaN.
      const float inv = l > 0 ? 1.0f / l : 0.0f;
      float* out = a.out.ptr(token, head(r));
      const float* o = st_.o + r * ldo_;
      for (int64_t e = 0; e < c_.d; ++e) out[e] = o[e] * inv;
      if (!a.lse.empty()) a.lse(head(r), token) = l > 0 ? st_.m[r] + std::log(l) : kNegInf;
    }
  }

  const Context& c_;
  const QueryTile& t_;
  ForwardState st_;
  PackedHead packed_;
  SeqSpan span_;
  int64_t lq_, lk_, ldo_;
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

FlashProducts flash_products() { return forced_products; }

void set_flash_products(FlashProducts p) { forced_products = p; }

void flash_attention(const AttentionOptions& opts, const AttentionArgs& args) {
  // The packed path checks q, k and v for NaN and inf while it packs them (a separate scan took
  // 2 % of a causal forward at L 2048) and throws check_finite's error after the tiles have run.
  const bool packed = use_packed_kernels();
  if (packed)
    validate_layout(opts, args);
  else
    validate(opts, args);
  check(!args.out.empty() || args.q.numel() == 0, "out: the forward needs an output view");
  check(args.out.inner_contiguous(), "out: last dimension must be contiguous");
  const Context c(opts, args);
  const int64_t positions =
      flash::positions_per_tile(FlashTiles::kRowsPerTile, c.g, FlashTiles::kMaxQueryTile);
  const auto tiles = make_tiles(c, positions);
  std::atomic<bool> nonfinite{false};
  const int64_t rows = positions * c.g, rows_pad = flash::round_up(rows, flash::kRowBlock);
  const int64_t ldo = packed ? flash::padded_dim(c.d) : c.d;
  const int64_t qp_stride = rows_pad * flash::kValuePanel;
  const int64_t score_floats =
      packed ? rows_pad * flash::kScoreStride : rows * FlashTiles::kKeyTile;
  const size_t bytes =
      sizeof(float) * size_t((packed ? rows_pad * ldo : rows * c.d) + rows * ldo +
                             score_floats + 2 * rows) + 6 * 64;
  auto& spaces = thread_workspaces(bytes);
  BlasThreadsScope blas(1);
  auto run_tiles = [&](const std::vector<QueryTile>& list, auto&& head_of) {
    parallel_for_grouped(
        int64_t(list.size()), [&](int64_t i) { return list[size_t(i)].cost; }, kMinItemCost,
        [&](int64_t i) {
          Workspace& ws = spaces[size_t(thread_index())];
          ws.reset();
          auto f = [&](int64_t n) { return ws.alloc<float>(size_t(n)); };
          ForwardState st{packed ? nullptr : f(rows * c.d), packed ? f(rows_pad * ldo) : nullptr,
                          qp_stride, f(rows * ldo), f(score_floats), f(rows), f(rows)};
          const QueryTile& t = list[size_t(i)];
          if (!ForwardTile(c, t, st, head_of(t)).run())
            nonfinite.store(true, std::memory_order_relaxed);
        });
  };
  if (!packed) {
    run_tiles(tiles, [](const QueryTile&) { return PackedHead{}; });
    return;
  }
  // Packed path: (sequence, KV head) pairs in groups whose packed K and V fit kPackedBudget;
  // each group packs its pairs in parallel, then runs their query tiles.
  constexpr int64_t kPackedBudget = int64_t(1) << 25;  // floats (128 MiB)
  const int64_t nseq = num_sequences(args);
  std::vector<int64_t> offset(size_t(nseq * c.hkv + 1), 0);  // pair → first float
  for (int64_t b = 0; b < nseq; ++b) {
    const SeqSpan sp = sequence_span(args, b);
    const int64_t lk = sp.k_end - sp.k_begin;
    const int64_t floats = flash::round_up(flash::packed_keys_size(lk, c.d) +
                                               flash::packed_values_size(lk, c.d), 16);
    for (int64_t hk = 0; hk < c.hkv; ++hk) {
      const size_t pair = size_t(b * c.hkv + hk);
      offset[pair + 1] = offset[pair] + floats;
    }
  }
  thread_local Workspace store;  // kept: the pages are not faulted in again on every call
  for (int64_t first = 0; first < nseq * c.hkv;) {
    int64_t last = first + 1;  // pairs [first, last): at least one, within the budget if possible
    while (last < nseq * c.hkv && offset[size_t(last + 1)] - offset[size_t(first)] <= kPackedBudget)
      ++last;
    const int64_t base = offset[size_t(first)];
    store.reserve(sizeof(float) * size_t(offset[size_t(last)] - base) + 64);
    float* buf = store.alloc<float>(size_t(offset[size_t(last)] - base));
    auto head_at = [&](int64_t pair) {
      const int64_t lk = [&] {
        const SeqSpan sp = sequence_span(args, pair / c.hkv);
        return sp.k_end - sp.k_begin;
      }();
      float* k = buf + (offset[size_t(pair)] - base);
      return std::pair<float*, float*>{k, k + flash::packed_keys_size(lk, c.d)};
    };
    // Packing groups of at least kMinItemCost / 16 = 1024 keys: a ViT's 16-key pairs pack 64 to
    // a group (or fewer, so that each thread gets four groups), long sequences one pair each.
    const auto keys = [&](int64_t idx) {
      const SeqSpan sp = sequence_span(args, (first + idx) / c.hkv);
      return double(sp.k_end - sp.k_begin);
    };
    parallel_for_grouped(last - first, keys, kMinItemCost / 16, [&](int64_t idx) {
      const int64_t pair = first + idx, b = pair / c.hkv, hk = pair % c.hkv;
      const SeqSpan sp = sequence_span(args, b);
      if (sp.k_end == sp.k_begin) return;
      const auto [kp, vp] = head_at(pair);
      const bool finite =
          flash::pack_keys(args.k.ptr(sp.k_begin, hk), c.ld(args.k), sp.k_end - sp.k_begin, c.d,
                           kp) &
          flash::pack_values(args.v.ptr(sp.k_begin, hk), c.ld(args.v), sp.k_end - sp.k_begin,
                             c.d, vp);
      if (!finite) nonfinite.store(true, std::memory_order_relaxed);
    });
    std::vector<QueryTile> group;
    for (const QueryTile& t : tiles)
      if (const int64_t pair = t.b * c.hkv + t.hk; pair >= first && pair < last) group.push_back(t);
    run_tiles(group, [&](const QueryTile& t) {
      const auto [kp, vp] = head_at(t.b * c.hkv + t.hk);
      return PackedHead{kp, vp};
    });
    first = last;
  }
  if (nonfinite.load()) {
    check_inputs_finite(args);  // throws, naming the first NaN or inf of q, k, v
    check(false, "q, k or v: non-finite value");
  }
}

}  // namespace attnkit
