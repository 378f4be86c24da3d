// Split-KV decode (flash-decoding) over a KV cache: the work items of the plan (decode_plan.hpp),
// each a sequence and a chunk of its cache read in address order, then their merge. Loop nest of
// one work item:
//   for each block of bt tokens:
//     for each sub-block, each KV head hk:  S[n·G, sub] = Q_hk·K[sub, hk]ᵀ   (decode_scores.cpp)
//     for each KV head hk:                  softcap; ALiBi bias; mask; online softmax
//     for each sub-block, each KV head hk:  O_hk[n·G, D] += P·V[sub, hk]     (decode_values.cpp)
// Sub-blocks run in address order, or, with decode_page_order() (on Intel CPUs by default), when
// several tokens share a 4 KiB page and the block needs no positions, one page phase at a time
// (run_item), so each page is read forward.
// Stored K/V are converted in registers (no float32 copy of the cache). Each kernel prefetches
// the rows it reads `ahead` tokens further on, interleaved with its FMAs (see run_item).
// The G query heads of a KV head share each converted K/V vector, so arithmetic intensity grows
// with G. The items' partial results are merged with their (max, sum) pairs; the plan depends on
// the cache contents only, so results do not depend on the thread count.
// PyTorch: softmax(q @ k.T * scale + mask) @ v over the cached keys and values.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include <unistd.h>

#include "attnkit/attention/decode.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/core/workspace.hpp"
#include "attnkit/ops/rope.hpp"
#include "decode_kernels.hpp"
#include "decode_plan.hpp"
#include "decode_wide.hpp"
#include "flash_common.hpp"
#include "flash_tile_kernels.hpp"

namespace attnkit {
namespace {

using decode::Item;
using decode::Plan;
using decode::prefetch_ahead;
using attnkit::prefetch_range;
using decode::Rows;
using decode::Run;
using decode::score_kernel;
using decode::ScoreKernel;
using decode::value_kernel;
using decode::ValueKernel;
using flash::kNegInf;

// Tokens of token_bytes per 4 KiB page when they tile it exactly (more than one), else 1.
int64_t page_phases(int64_t token_bytes) {
  constexpr int64_t kPage = 4096;
  return token_bytes < kPage && kPage % token_bytes == 0 ? kPage / token_bytes : 1;
}

class Decoder {
 public:
  Decoder(const DecodeOptions& o, const DecodeArgs& a, const Plan& p)
      : o_(o), a_(a), p_(p), cfg_(a.cache->config()), n_(a.q.shape[0] / int64_t(a.seqs.size())),
        h_(a.q.shape[1]), hkv_(cfg_.kv_heads), g_(h_ / hkv_), d_(cfg_.head_dim),
        rows_(n_ * g_), elem_(int64_t(dtype_size(cfg_.dtype))),
        bt_(std::clamp<int64_t>(DecodeTiles::kStageBytes / (hkv_ * d_ * elem_), 4,
                                DecodeTiles::kBlockTokens)),
        sub_(std::clamp<int64_t>(DecodeTiles::sub_block_bytes() / (hkv_ * d_ * elem_), 4, bt_)),
        ahead_(std::max<int64_t>(DecodeTiles::kPrefetchBytes / (hkv_ * d_ * elem_), sub_)),
        phases_(decode_page_order() ? page_phases(hkv_ * d_ * elem_) : 1),
        scale_(effective_scale(o.attention, d_)),
        wide_(decode::wide_supported(rows_, d_) && o.attention.softcap == 0 && a.alibi_slopes.empty()) {
    if (o.rope_theta > 0) {
      const int64_t most = *std::max_element(p.held.begin(), p.held.end());
      rope_ = rope_table_for(d_, o.rope_theta, most);
    }
    // Every item of a sequence reads the same queries: prepared once per call.
    const int64_t per_seq = hkv_ * rows_ * d_, nseq = int64_t(a.seqs.size());
    const size_t query_floats = size_t(nseq * per_seq * (wide_ ? 2 : 1));
    query_store_.reserve(sizeof(float) * query_floats);
    queries_ = query_store_.alloc<float>(query_floats);
    for (int64_t b = 0; b < nseq; ++b) {
      float* q = queries_ + b * per_seq;
      load_queries(b, p.held[size_t(b)], q);
      if (!wide_) continue;
      float* qt = queries_ + (nseq + b) * per_seq;
      for (int64_t hk = 0; hk < hkv_; ++hk)
        for (int64_t e = 0; e < d_; ++e)
          for (int64_t r = 0; r < rows_; ++r) qt[(hk * d_ + e) * rows_ + r] = q[(hk * rows_ + r) * d_ + e];
    }
  }

  int64_t scratch_bytes() const {
    if (wide_)  // Pt, one stage
      return int64_t(sizeof(float)) * decode::kWideTokens * (rows_ + d_) + 2 * 64;
    const int64_t stage = rope_ ? bt_ * hkv_ * d_ : 0;
    return int64_t(sizeof(float)) * (hkv_ * rows_ * bt_ + stage) + 2 * 64;
  }
  // Floats of one item's partial result: m and l for each row ([Hkv][n·G]), then O ([Hkv][n·G][D]),
  // rounded up to a cache line (16 floats) so that items running on two threads never share one
  // (their m, l and O are rewritten on every block of keys).
  int64_t partial_floats() const { return (hkv_ * rows_ * (d_ + 2) + 15) / 16 * 16; }
  // Query rows per KV head and sequence (n·G).
  int64_t rows() const { return rows_; }

  // Runs one item, leaving its unnormalised (m, l, O) per row in `partial`.
  void run(const Item& it, Workspace& ws, float* partial) const {
    // With rope the keys are rotated into a float32 stage; V keeps its storage dtype.
    const DType k_dtype = rope_ ? DType::f32 : cfg_.dtype;
    const Kernels kn{score_kernel(k_dtype), value_kernel(cfg_.dtype)};
    if (wide_) return run_item_wide(it, ws, partial);
    run_item(it, kn, ws, partial);
  }

  // Merges the partials of items [first, last) of sequence b into out and lse, for query rows
  // [r0, r1) of KV head hk (each row on its own: the rows' blocking does not change results).
  void merge(int64_t b, int64_t hk, int64_t r0, int64_t r1, const float* partials, int64_t first,
             int64_t last) const {
    const int64_t pf = partial_floats();
    std::vector<double> acc(static_cast<size_t>(d_));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t row = hk * rows_ + r, i = r / g_, hq = hk * g_ + r % g_;
      double mx = a_.sink_logits.empty() ? -INFINITY : double(a_.sink_logits[size_t(hq)]);
      for (int64_t it = first; it < last; ++it) mx = std::max(mx, double(partials[it * pf + row]));
      double sum = a_.sink_logits.empty() ? 0.0 : std::exp(a_.sink_logits[size_t(hq)] - mx);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t it = first; it < last; ++it) {
        const float* p = partials + it * pf;
        if (p[row] == kNegInf) continue;
        const double w = std::exp(double(p[row]) - mx);
        sum += w * p[hkv_ * rows_ + row];
        const float* oi = p + 2 * hkv_ * rows_ + row * d_;
        for (int64_t e = 0; e < d_; ++e) acc[size_t(e)] += w * oi[e];
      }
      float* out = a_.out.ptr(b * n_ + i, hq);
      // No visible key and no sink: zeros and lse = -inf, never NaN.
      for (int64_t e = 0; e < d_; ++e) out[e] = sum > 0 ? float(acc[size_t(e)] / sum) : 0.0f;
      if (!a_.lse.empty()) a_.lse(hq, b * n_ + i) = sum > 0 ? float(mx + std::log(sum)) : kNegInf;
    }
  }

 private:
  KeyRange vis(int64_t i, int64_t held) const { return visible_keys(o_.attention, i, n_, held); }

  struct Kernels {
    ScoreKernel scores;
    ValueKernel values;
  };

  struct Partial {
    float *m, *l, *o;
  };
  // Splits an item's partial buffer into running max m [Hkv·rows], sum l [Hkv·rows] and
  // unnormalised output o [Hkv·rows·D], reset to (-inf, 0, 0).
  Partial reset_partial(float* partial) const {
    const Partial p{partial, partial + hkv_ * rows_, partial + 2 * hkv_ * rows_};
    std::fill(p.m, p.m + hkv_ * rows_, kNegInf);
    std::fill(p.l, p.l + hkv_ * rows_, 0.0f);
    std::fill(p.o, p.o + hkv_ * rows_ * d_, 0.0f);
    return p;
  }

  void run_item(const Item& it, const Kernels& kn, Workspace& ws, float* partial) const {
    const auto [m, l, o] = reset_partial(partial);
    const float* q = queries_ + it.b * hkv_ * rows_ * d_;  // [Hkv][n·G][D], scaled (+ rope)
    float* s = ws.alloc<float>(size_t(hkv_ * rows_ * bt_));  // [Hkv][n·G][bt] scores → P
    float* rotated = rope_ ? ws.alloc<float>(size_t(bt_ * hkv_ * d_)) : nullptr;  // [bt][Hkv][D]
    const int64_t held = p_.held[size_t(it.b)];
    const KeyRange first = vis(0, held), last = vis(n_ - 1, held);
    const int64_t token_bytes = hkv_ * d_ * elem_;
    for (int64_t ri = it.run_begin; ri < it.run_end; ++ri) {
      const Run& run = p_.runs[size_t(ri)];
      const KVSegment& sg = p_.segs[size_t(it.b)][size_t(run.seg)];
      for (int64_t t0 = run.start; t0 < run.start + run.count; t0 += bt_) {
        const int64_t bt = std::min(bt_, run.start + run.count - t0);
        const int64_t pos0 = sg.logical_start + t0;  // cache position of the block's first token
        if (last.hi <= pos0 || first.lo >= pos0 + bt) continue;  // no query sees this block
        const bool masked = !(last.lo <= pos0 && first.hi >= pos0 + bt);
        const std::byte* kb = sg.k + t0 * token_bytes;
        const std::byte* vb = sg.v + t0 * token_bytes;
        // Prefetching: the kernels request each row they read again `ahead` tokens later (the
        // same head's row, one or two sub-blocks on), a few lines per token step, so the fill
        // buffers stay busy while the core computes; the first `ahead` tokens of a run are
        // requested here. (Bursts of thousands of prefetches between kernel calls stall the
        // core once the fill buffers are full: compute and memory then take turns.)
        if (t0 == run.start) {
          const int64_t first = std::min(ahead_, run.count) * token_bytes;
          prefetch_range(kb, first);
          prefetch_range(vb, first);
        }
        const std::byte* k_end = sg.k + (run.start + run.count) * token_bytes;
        const std::byte* v_end = sg.v + (run.start + run.count) * token_bytes;
        const int64_t pf = ahead_ * token_bytes;
        Rows k{kb, token_bytes, sg.k_scale ? sg.k_scale + t0 * hkv_ : nullptr, hkv_, pf, k_end};
        if (rotated) {  // the stage is in cache already: rotate_keys prefetches the stored rows
          rotate_keys(k, bt, pos0, rotated);
          k = {reinterpret_cast<const std::byte*>(rotated), hkv_ * d_ * 4, nullptr, 0};
        }
        const int64_t k_head = rotated ? d_ * 4 : d_ * elem_;
        // Phases: with `ph` tokens per 4 KiB page, a block whose scores need no positions (no
        // mask, no ALiBi) and whose keys are not rotated is read one phase at a time, tokens
        // ph·i + phase, so each page is read in address order (head by head through its first
        // token, then its second...) and the hardware prefetchers follow; score columns are then
        // in phase order, and the value pass reads V in the same order. Otherwise ph = 1.
        const int64_t ph = !masked && !rotated && a_.alibi_slopes.empty() && bt % phases_ == 0
                               ? phases_ : 1;
        const int64_t per = bt / ph;  // tokens per phase
        // Calls f(t, u, col) for the block's sub-blocks in reading order: `sub_` tokens (u) of a
        // phase, t, t + ph, ..., whose scores sit in columns [col, col + u). Each sub-block serves
        // all heads, so the cache is consumed close to address order.
        auto each_sub_block = [&](auto&& f) {
          for (int64_t phase = 0; phase < ph; ++phase)
            for (int64_t u0 = 0; u0 < per; u0 += sub_)
              f(phase + u0 * ph, std::min(sub_, per - u0), phase * per + u0);
        };
        each_sub_block([&](int64_t t, int64_t u, int64_t col) {
          for (int64_t hk = 0; hk < hkv_; ++hk) {
            const Rows kh{k.base + t * k.stride + hk * k_head, ph * k.stride,
                          k.scale ? k.scale + t * k.scale_stride + hk : nullptr,
                          ph * k.scale_stride, k.pf, k.pf_end};
            kn.scores(q + hk * rows_ * d_, rows_, kh, u, d_, s + hk * rows_ * bt_ + col, bt_);
          }
        });
        for (int64_t hk = 0; hk < hkv_; ++hk)
          online_softmax(s + hk * rows_ * bt_, bt, pos0, masked, it.b, hk, held, m + hk * rows_,
                         l + hk * rows_, o + hk * rows_ * d_);
        each_sub_block([&](int64_t t, int64_t u, int64_t col) {
          for (int64_t hk = 0; hk < hkv_; ++hk) {
            const Rows vh{vb + t * token_bytes + hk * d_ * elem_, ph * token_bytes,
                          sg.v_scale ? sg.v_scale + (t0 + t) * hkv_ + hk : nullptr, ph * hkv_,
                          pf, v_end};
            kn.values(s + hk * rows_ * bt_ + col, bt_, rows_, vh, u, d_, o + hk * rows_ * d_);
          }
        });
      }
    }
  }

  // run_item for wide groups (decode_wide.hpp), blocks of kWideTokens tokens, one KV head at a
  // time. The fused score kernel converts K a register block of tokens at a time into an L1 tile
  // and exponentiates the scores in registers; the value kernel converts each V vector once, for
  // all n·G rows. Probabilities are kept transposed, Pt [bt][n·G], so the rows are the vector
  // dimension throughout. Blocks cut by a mask (and rotated keys) take a float32 stage of K;
  // masked blocks then score, mask and softmax in three passes.
  void run_item_wide(const Item& it, Workspace& ws, float* partial) const {
    using decode::kWideTokens;
    const auto [m, l, o] = reset_partial(partial);
    const int64_t per_seq = hkv_ * rows_ * d_;
    const float* qt = queries_ + (int64_t(a_.seqs.size()) + it.b) * per_seq;  // [Hkv][D][n·G]
    float* pt = ws.alloc<float>(size_t(kWideTokens * rows_));     // [bt][n·G] scores → P
    float* stage = ws.alloc<float>(size_t(kWideTokens * d_));     // [bt][D] K, then V
    const decode::WideStage convert = decode::wide_stage(cfg_.dtype);
    const struct {
      decode::WideScoresSoftmax scores, scores_rotated;
      decode::WideValues values;
    } kern{decode::wide_scores_softmax(cfg_.dtype), decode::wide_scores_softmax(DType::f32),
           decode::wide_values_stored(cfg_.dtype)};
    const int64_t held = p_.held[size_t(it.b)];
    const KeyRange first = vis(0, held), last = vis(n_ - 1, held);
    const int64_t token_bytes = hkv_ * d_ * elem_;
    for (int64_t ri = it.run_begin; ri < it.run_end; ++ri) {
      const Run& run = p_.runs[size_t(ri)];
      const KVSegment& sg = p_.segs[size_t(it.b)][size_t(run.seg)];
      const int64_t pf = ahead_ * token_bytes;
      // Prefetches run on to the segment's end: a thread's next item usually continues this run.
      const std::byte* k_end = sg.k + sg.n * token_bytes;
      const std::byte* v_end = sg.v + sg.n * token_bytes;
      for (int64_t t0 = run.start; t0 < run.start + run.count; t0 += kWideTokens) {
        const int64_t bt = std::min(kWideTokens, run.start + run.count - t0);
        const int64_t pos0 = sg.logical_start + t0;
        if (last.hi <= pos0 || first.lo >= pos0 + bt) continue;  // no query sees this block
        const bool masked = !(last.lo <= pos0 && first.hi >= pos0 + bt);
        const std::byte* kb = sg.k + t0 * token_bytes;
        const std::byte* vb = sg.v + t0 * token_bytes;
        if (t0 == run.start) {  // the first block; the kernels prefetch `ahead` tokens on
          const int64_t first_bytes = std::min(kWideTokens, run.count) * token_bytes;
          prefetch_range(kb, first_bytes);
          prefetch_range(vb, first_bytes);
        }
        for (int64_t hk = 0; hk < hkv_; ++hk) {
          const int64_t head = hk * d_ * elem_;
          const Rows k{kb + head, token_bytes, sg.k_scale ? sg.k_scale + t0 * hkv_ + hk : nullptr,
                       hkv_, pf, k_end};
          const Rows v{vb + head, token_bytes, sg.v_scale ? sg.v_scale + t0 * hkv_ + hk : nullptr,
                       hkv_, pf, v_end};
          const float* qh = qt + hk * d_ * rows_;
          float *mh = m + hk * rows_, *lh = l + hk * rows_, *oh = o + hk * rows_ * d_;
          if (rope_ || masked) {  // K → float32 stage (rotated), then read in place
            convert(k, bt, d_, stage);
            if (rope_)
              for (int64_t t = 0; t < bt; ++t)
                rope_rotate(stage + t * d_, d_, rope_->cos(pos0 + t), rope_->sin(pos0 + t));
          }
          const Rows staged{reinterpret_cast<const std::byte*>(stage), d_ * 4, nullptr, 0};
          if (masked) {
            decode::wide_scores(qh, rows_, rows_, stage, d_, bt, d_, pt, rows_);
            mask_columns(pt, bt, pos0, held);
            decode::wide_online_softmax(pt, rows_, rows_, bt, mh, lh, oh, d_);
          } else if (rope_) {
            kern.scores_rotated(qh, rows_, staged, bt, d_, pt, mh, lh, oh, nullptr, nullptr);
          } else {
            kern.scores(qh, rows_, k, bt, d_, pt, mh, lh, oh, stage, &v);
          }
          // The fused score pass has requested V's rows ahead; the other paths leave it to values.
          const bool fused = !masked && !rope_;
          kern.values(pt, rows_, fused ? Rows{v.base, v.stride, v.scale, v.scale_stride} : v, bt, d_,
                      oh, stage);
        }
      }
    }
  }

  // Pt[t, r] = -inf where the key at cache position pos0 + t is outside row r's visible range.
  void mask_columns(float* st, int64_t bt, int64_t pos0, int64_t held) const {
    for (int64_t r = 0; r < rows_; ++r) {
      const KeyRange vr = vis(r / g_, held);
      for (int64_t t = 0; t < bt; ++t)
        if (pos0 + t < vr.lo || pos0 + t >= vr.hi) st[t * rows_ + r] = kNegInf;
    }
  }

  // K rows of a block → float32 [bt][Hkv][D], rotated by their cache positions.
  void rotate_keys(const Rows& k, int64_t bt, int64_t pos0, float* dst) const {
    for (int64_t t = 0; t < bt; ++t) {
      prefetch_ahead(k, k.base + t * k.stride, k.stride);
      kv_load_rows(k.base + t * k.stride, cfg_.dtype, k.scale ? k.scale + t * hkv_ : nullptr, hkv_,
                   d_, dst + t * hkv_ * d_, d_);
      for (int64_t hk = 0; hk < hkv_; ++hk)
        rope_rotate(dst + (t * hkv_ + hk) * d_, d_, rope_->cos(pos0 + t), rope_->sin(pos0 + t));
    }
  }

  void load_queries(int64_t b, int64_t held, float* q) const {
    for (int64_t i = 0; i < n_; ++i)
      for (int64_t hq = 0; hq < h_; ++hq) {
        float* dst = q + ((hq / g_) * rows_ + i * g_ + hq % g_) * d_;
        const float* src = a_.q.ptr(b * n_ + i, hq);
        for (int64_t e = 0; e < d_; ++e) dst[e] = src[e];
        if (rope_) {
          const int64_t pos = held - n_ + i;
          rope_rotate(dst, d_, rope_->cos(pos), rope_->sin(pos));
        }
        for (int64_t e = 0; e < d_; ++e) dst[e] *= scale_;
      }
  }

  // Online-softmax update of KV head hk's rows of sequence b with scores s [n·G, bt] (row stride
  // bt_) of the keys at cache positions [pos0, pos0 + bt); leaves P in s.
  void online_softmax(float* s, int64_t bt, int64_t pos0, bool masked, int64_t b, int64_t hk,
                      int64_t held, float* m, float* l, float* o) const {
    for (int64_t r = 0; r < rows_; ++r) {
      const int64_t i = r / g_;
      const flash::RowBias bias{alibi_slope(b, hk * g_ + r % g_), i + held - n_};
      flash::online_softmax_row(s + r * bt_, bt, o_.attention.softcap, bias, masked, pos0,
                                vis(i, held), m[r], l[r], o + r * d_, d_, flash::tile_exp_sum);
    }
  }

  // ALiBi slope of query head hq in sequence b (slopes [H] or [B, H]); 0 without ALiBi.
  float alibi_slope(int64_t b, int64_t hq) const {
    const auto& sl = a_.alibi_slopes;
    if (sl.empty()) return 0.0f;
    return sl[size_t(int64_t(sl.size()) == h_ ? hq : b * h_ + hq)];
  }

  const DecodeOptions& o_;
  const DecodeArgs& a_;
  const Plan& p_;
  const KVCacheConfig& cfg_;
  int64_t n_, h_, hkv_, g_, d_, rows_, elem_, bt_, sub_;
  int64_t ahead_;  // prefetch distance in tokens
  int64_t phases_;  // with decode_page_order(): tokens per 4 KiB page when a token's rows divide a
                   // page; else 1 (run_item)
  float scale_;
  std::shared_ptr<const RopeTable> rope_;
  bool wide_;  // the wide-group kernels serve this call (decode_wide.hpp)
  // Per sequence b: queries [Hkv][n·G][D] at b·Hkv·n·G·D, scaled (+ rope); with wide_, then the
  // same transposed, [Hkv][D][n·G], at (B + b)·Hkv·n·G·D.
  // 64-byte aligned: the score kernels load query vectors in their inner loops, and a vector that
  // straddles two cache lines costs two loads.
  Workspace query_store_;
  float* queries_ = nullptr;
};

}  // namespace

int64_t DecodeTiles::sub_block_bytes() {
  static const int64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return std::clamp<int64_t>(l2 > 0 ? l2 / 32 : 0, 16 * 1024, 32 * 1024);
  }();
  return bytes;
}

void decode_attention(const DecodeOptions& o, const DecodeArgs& a) {
  validate(o, a);
  const Plan plan = decode::make_plan(a);
  const Decoder dec(o, a, plan);
  const int64_t items = int64_t(plan.items.size()), pf = dec.partial_floats();
  // Kept across calls and not zeroed (each item resets its own partial): a fresh vector of this
  // size (0.5 MiB for MQA at S 16384) was zeroed and page-faulted in on every call, on one thread.
  thread_local Workspace partial_store;
  partial_store.reserve(sizeof(float) * size_t(items * pf));
  float* const partials = partial_store.alloc<float>(size_t(items * pf));
  auto& spaces = thread_workspaces(size_t(dec.scratch_bytes()));
  // Each thread runs a contiguous span of the items (of about equal tokens), so it streams through
  // one region of the cache and writes the same partials on every call; a thread that finishes
  // early takes the others' last items. Interleaving the items between the threads (dynamic
  // scheduling) was 5-9 % slower for GQA and MQA (docs/performance.md, Work plan).
  const auto tokens = [&](int64_t idx) {
    const Item& it = plan.items[size_t(idx)];
    int64_t n = 0;
    for (int64_t r = it.run_begin; r < it.run_end; ++r) n += plan.runs[size_t(r)].count;
    return double(n);
  };
  parallel_for_spans(items, tokens, [&](int64_t idx) {
    Workspace& ws = spaces[size_t(thread_index())];
    ws.reset();
    dec.run(plan.items[size_t(idx)], ws, partials + idx * pf);
  });
  // Items of a sequence are consecutive; merge each sequence's range, one block of up to kMergeRows
  // query rows of one KV head per index (MQA's 32 rows of one head in 4 blocks, so both threads
  // merge).
  const int64_t nseq = int64_t(a.seqs.size());
  std::vector<int64_t> begin(static_cast<size_t>(nseq + 1), items);
  for (int64_t it = items - 1; it >= 0; --it) begin[size_t(plan.items[size_t(it)].b)] = it;
  for (int64_t b = nseq - 1; b >= 0; --b) begin[size_t(b)] = std::min(begin[size_t(b)], begin[size_t(b + 1)]);
  const int64_t hkv = a.cache->config().kv_heads, rows = dec.rows();
  constexpr int64_t kMergeRows = 8;
  const int64_t blocks = (rows + kMergeRows - 1) / kMergeRows;
  parallel_for(nseq * hkv * blocks, [&](int64_t idx) {
    const int64_t b = idx / (hkv * blocks), hk = idx / blocks % hkv, r0 = idx % blocks * kMergeRows;
    dec.merge(b, hk, r0, std::min(rows, r0 + kMergeRows), partials, begin[size_t(b)],
              begin[size_t(b + 1)]);
  });
}

}  // namespace attnkit
