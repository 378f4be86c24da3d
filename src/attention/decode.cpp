// Split-KV decode (flash-decoding) over a KV cache. Loop nest of one work item (a sequence and a
// chunk of its cache, read in address order):
//   for each block of bt tokens:            K[bt, Hkv, D] → float32 Kf[Hkv][bt][D] (+ rope)
//     for each KV head hk:                  S[n·G, bt] = Q_hk·Kf[hk]ᵀ; softcap; mask; online softmax
//     V[bt, Hkv, D] → float32 Vf[Hkv][bt][D]
//     for each KV head hk:                  O_hk[n·G, D] += P·Vf[hk]
// The G query heads of a KV head share each converted K/V row, so arithmetic intensity grows with
// G. Chunks of kChunk tokens are merged with their (max, sum) pairs; the chunking depends on the
// cache contents only, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/attention/decode.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/core/workspace.hpp"
#include "attnkit/ops/rope.hpp"
#include "attnkit/ops/vec_math.hpp"
#include "flash_common.hpp"
#include "hwy/highway.h"

namespace attnkit {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

using flash::kNegInf;

// s[r·bt + t] = q_r·k_t for r < rows, t < bt; q [rows, d], k [bt, d] contiguous.
void block_scores(const float* q, int64_t rows, const float* k, int64_t bt, int64_t d, float* s) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = int64_t(hn::Lanes(df)), dv = d - d % lanes;
  for (int64_t t = 0; t < bt; ++t) {
    const float* kt = k + t * d;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {  // four rows share each load of k
      const float* q0 = q + r * d;
      auto a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t e = 0; e < dv; e += lanes) {
        const auto kv = hn::LoadU(df, kt + e);
        a0 = hn::MulAdd(hn::LoadU(df, q0 + e), kv, a0);
        a1 = hn::MulAdd(hn::LoadU(df, q0 + d + e), kv, a1);
        a2 = hn::MulAdd(hn::LoadU(df, q0 + 2 * d + e), kv, a2);
        a3 = hn::MulAdd(hn::LoadU(df, q0 + 3 * d + e), kv, a3);
      }
      float r4[4] = {hn::GetLane(hn::SumOfLanes(df, a0)), hn::GetLane(hn::SumOfLanes(df, a1)),
                     hn::GetLane(hn::SumOfLanes(df, a2)), hn::GetLane(hn::SumOfLanes(df, a3))};
      for (int64_t e = dv; e < d; ++e)
        for (int j = 0; j < 4; ++j) r4[j] += q0[j * d + e] * kt[e];
      for (int j = 0; j < 4; ++j) s[(r + j) * bt + t] = r4[j];
    }
    for (; r < rows; ++r) s[r * bt + t] = dot(q + r * d, kt, d);
  }
}

// o[r, :] += Σ_t p[r·bt + t]·v[t, :] for r < rows; v [bt, d], o [rows, d] contiguous.
void block_accumulate(const float* p, int64_t rows, const float* v, int64_t bt, int64_t d, float* o) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = int64_t(hn::Lanes(df)), dv = d - d % (2 * lanes);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    for (int64_t e = 0; e < dv; e += 2 * lanes) {  // 4 rows × 2 vectors of accumulators
      float* o0 = o + r * d + e;
      auto a00 = hn::LoadU(df, o0), a01 = hn::LoadU(df, o0 + lanes);
      auto a10 = hn::LoadU(df, o0 + d), a11 = hn::LoadU(df, o0 + d + lanes);
      auto a20 = hn::LoadU(df, o0 + 2 * d), a21 = hn::LoadU(df, o0 + 2 * d + lanes);
      auto a30 = hn::LoadU(df, o0 + 3 * d), a31 = hn::LoadU(df, o0 + 3 * d + lanes);
      for (int64_t t = 0; t < bt; ++t) {
        const auto v0 = hn::LoadU(df, v + t * d + e), v1 = hn::LoadU(df, v + t * d + e + lanes);
        const float* pt = p + r * bt + t;
        const auto p0 = hn::Set(df, pt[0]), p1 = hn::Set(df, pt[bt]), p2 = hn::Set(df, pt[2 * bt]),
                   p3 = hn::Set(df, pt[3 * bt]);
        a00 = hn::MulAdd(p0, v0, a00), a01 = hn::MulAdd(p0, v1, a01);
        a10 = hn::MulAdd(p1, v0, a10), a11 = hn::MulAdd(p1, v1, a11);
        a20 = hn::MulAdd(p2, v0, a20), a21 = hn::MulAdd(p2, v1, a21);
        a30 = hn::MulAdd(p3, v0, a30), a31 = hn::MulAdd(p3, v1, a31);
      }
      hn::StoreU(a00, df, o0), hn::StoreU(a01, df, o0 + lanes);
      hn::StoreU(a10, df, o0 + d), hn::StoreU(a11, df, o0 + d + lanes);
      hn::StoreU(a20, df, o0 + 2 * d), hn::StoreU(a21, df, o0 + 2 * d + lanes);
      hn::StoreU(a30, df, o0 + 3 * d), hn::StoreU(a31, df, o0 + 3 * d + lanes);
    }
    for (int64_t e = dv; e < d; ++e)
      for (int j = 0; j < 4; ++j) {
        float acc = o[(r + j) * d + e];
        for (int64_t t = 0; t < bt; ++t) acc += p[(r + j) * bt + t] * v[t * d + e];
        o[(r + j) * d + e] = acc;
      }
  }
  for (; r < rows; ++r)
    for (int64_t t = 0; t < bt; ++t) {
      const float w = p[r * bt + t];
      for (int64_t e = 0; e < d; ++e) o[r * d + e] += w * v[t * d + e];
    }
}

struct Run {  // tokens [start, start + count) of segment `seg`
  int64_t seg, start, count;
};
struct Item {  // one sequence's runs [run_begin, run_end)
  int64_t b, run_begin, run_end;
};

struct Plan {
  std::vector<std::vector<KVSegment>> segs;  // per sequence
  std::vector<int64_t> held;                 // per sequence
  std::vector<Run> runs;
  std::vector<Item> items;
};

Plan make_plan(const DecodeArgs& a) {
  Plan p;
  for (size_t b = 0; b < a.seqs.size(); ++b) {
    p.segs.push_back(a.cache->segments(a.seqs[b], a.layer));
    p.held.push_back(a.cache->cached(a.seqs[b], a.layer));
    int64_t in_item = 0;
    for (size_t s = 0; s < p.segs.back().size(); ++s)
      for (int64_t t = 0; t < p.segs.back()[s].n;) {
        if (in_item == 0 || in_item == DecodeTiles::kChunk) {
          p.items.push_back({int64_t(b), int64_t(p.runs.size()), int64_t(p.runs.size())});
          in_item = 0;
        }
        const int64_t count = std::min(p.segs.back()[s].n - t, DecodeTiles::kChunk - in_item);
        p.runs.push_back({int64_t(s), t, count});
        p.items.back().run_end = int64_t(p.runs.size());
        in_item += count;
        t += count;
      }
  }
  return p;
}

class Decoder {
 public:
  Decoder(const DecodeOptions& o, const DecodeArgs& a, const Plan& p)
      : o_(o), a_(a), p_(p), cfg_(a.cache->config()), n_(a.q.shape[0] / int64_t(a.seqs.size())),
        h_(a.q.shape[1]), hkv_(cfg_.kv_heads), g_(h_ / hkv_), d_(cfg_.head_dim),
        rows_(n_ * g_), elem_(int64_t(dtype_size(cfg_.dtype))),
        bt_(std::clamp<int64_t>(DecodeTiles::kBlockFloats / (hkv_ * d_), 1, 128)),
        scale_(effective_scale(o.attention, d_)) {
    if (o.rope_theta > 0) {
      const int64_t most = *std::max_element(p.held.begin(), p.held.end());
      rope_ = rope_table_for(d_, o.rope_theta, most);
    }
  }

  int64_t n() const { return n_; }
  int64_t scratch_bytes() const {
    return int64_t(sizeof(float)) * (hkv_ * rows_ * d_ + hkv_ * bt_ * d_ + hkv_ * rows_ * bt_) + 3 * 64;
  }
  // Floats of one item's partial result: m and l for each row ([Hkv][n·G]), then O ([Hkv][n·G][D]).
  int64_t partial_floats() const { return hkv_ * rows_ * (d_ + 2); }

  // Runs one item, leaving its unnormalised (m, l, O) per row in `partial`.
  void run(const Item& it, Workspace& ws, float* partial) const {
    float* m = partial;
    float* l = partial + hkv_ * rows_;
    float* o = partial + 2 * hkv_ * rows_;
    float* q = ws.alloc<float>(size_t(hkv_ * rows_ * d_));   // [Hkv][n·G][D], scaled (+ rope)
    float* kv = ws.alloc<float>(size_t(hkv_ * bt_ * d_));    // [Hkv][bt][D], K then V
    float* s = ws.alloc<float>(size_t(hkv_ * rows_ * bt_));  // [Hkv][n·G][bt] scores → P
    const int64_t held = p_.held[size_t(it.b)];
    load_queries(it.b, held, q);
    std::fill(m, m + hkv_ * rows_, kNegInf);
    std::fill(l, l + hkv_ * rows_, 0.0f);
    std::fill(o, o + hkv_ * rows_ * d_, 0.0f);
    const KeyRange first = vis(0, held), last = vis(n_ - 1, held);
    for (int64_t ri = it.run_begin; ri < it.run_end; ++ri) {
      const Run& run = p_.runs[size_t(ri)];
      const KVSegment& sg = p_.segs[size_t(it.b)][size_t(run.seg)];
      for (int64_t t0 = run.start; t0 < run.start + run.count; t0 += bt_) {
        const int64_t bt = std::min(bt_, run.start + run.count - t0);
        const int64_t pos0 = sg.logical_start + t0;  // cache position of the block's first token
        if (last.hi <= pos0 || first.lo >= pos0 + bt) continue;  // no query sees this block
        const bool masked = !(last.lo <= pos0 && first.hi >= pos0 + bt);
        convert(sg.k, sg.k_scale, t0, bt, pos0, rope_ != nullptr, kv);
        for (int64_t hk = 0; hk < hkv_; ++hk) {
          float* sh = s + hk * rows_ * bt;
          block_scores(q + hk * rows_ * d_, rows_, kv + hk * bt * d_, bt, d_, sh);
          online_softmax(sh, bt, pos0, masked, held, m + hk * rows_, l + hk * rows_,
                         o + hk * rows_ * d_);
        }
        convert(sg.v, sg.v_scale, t0, bt, pos0, false, kv);
        for (int64_t hk = 0; hk < hkv_; ++hk)
          block_accumulate(s + hk * rows_ * bt, rows_, kv + hk * bt * d_, bt, d_,
                           o + hk * rows_ * d_);
      }
    }
  }

  // Merges the partials of items [first, last) of sequence b into out and lse.
  void merge(int64_t b, const float* partials, int64_t first, int64_t last) const {
    const int64_t pf = partial_floats();
    std::vector<double> acc(static_cast<size_t>(d_));
    for (int64_t hk = 0; hk < hkv_; ++hk)
      for (int64_t r = 0; r < rows_; ++r) {
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

  // Converts tokens [t0, t0 + bt) of a segment (read in address order) to float32 [Hkv][bt][D].
  void convert(const std::byte* base, const float* scales, int64_t t0, int64_t bt, int64_t pos0,
               bool rope, float* dst) const {
    for (int64_t t = 0; t < bt; ++t)
      for (int64_t hk = 0; hk < hkv_; ++hk) {
        const int64_t idx = (t0 + t) * hkv_ + hk;
        float* row = dst + (hk * bt + t) * d_;
        kv_load_row(base + idx * d_ * elem_, cfg_.dtype, scales ? scales[idx] : 1.0f, d_, row);
        if (rope) rope_rotate(row, d_, rope_->cos(pos0 + t), rope_->sin(pos0 + t));
      }
  }

  // Online-softmax update of one KV head's rows with scores s [n·G, bt]; leaves P in s.
  void online_softmax(float* s, int64_t bt, int64_t pos0, bool masked, int64_t held, float* m,
                      float* l, float* o) const {
    for (int64_t r = 0; r < rows_; ++r) {
      float* x = s + r * bt;
      if (o_.attention.softcap > 0) softcap_inplace(x, bt, o_.attention.softcap);
      if (masked) flash::mask_row(x, bt, pos0, vis(r / g_, held));
      const float m_new = std::max(m[r], row_max(x, bt));
      if (m_new == kNegInf) {
        std::fill(x, x + bt, 0.0f);
        continue;
      }
      const float sum = exp_sub_sum(x, bt, m_new);
      if (m_new != m[r]) {
        const float alpha = std::exp(m[r] - m_new);
        l[r] *= alpha;
        scale_inplace(o + r * d_, d_, alpha);
        m[r] = m_new;
      }
      l[r] += sum;
    }
  }

  const DecodeOptions& o_;
  const DecodeArgs& a_;
  const Plan& p_;
  const KVCacheConfig& cfg_;
  int64_t n_, h_, hkv_, g_, d_, rows_, elem_, bt_;
  float scale_;
  std::shared_ptr<const RopeTable> rope_;
};

}  // namespace

void decode_attention(const DecodeOptions& o, const DecodeArgs& a) {
  validate(o, a);
  check(a.out.inner_contiguous(), "out: last dimension must be contiguous");
  check(a.q.inner_contiguous(), "q: last dimension must be contiguous");
  const Plan plan = make_plan(a);
  const Decoder dec(o, a, plan);
  const int64_t items = int64_t(plan.items.size()), pf = dec.partial_floats();
  std::vector<float> partials(static_cast<size_t>(items * pf));
  auto& spaces = thread_workspaces(size_t(dec.scratch_bytes()));
  parallel_for(items, [&](int64_t idx) {
    Workspace& ws = spaces[size_t(thread_index())];
    ws.reset();
    dec.run(plan.items[size_t(idx)], ws, partials.data() + idx * pf);
  });
  // Items of a sequence are consecutive; merge each sequence's range.
  const int64_t nseq = int64_t(a.seqs.size());
  std::vector<int64_t> begin(static_cast<size_t>(nseq + 1), items);
  for (int64_t it = items - 1; it >= 0; --it) begin[size_t(plan.items[size_t(it)].b)] = it;
  for (int64_t b = nseq - 1; b >= 0; --b) begin[size_t(b)] = std::min(begin[size_t(b)], begin[size_t(b + 1)]);
  parallel_for(nseq, [&](int64_t b) { dec.merge(b, partials.data(), begin[size_t(b)], begin[size_t(b + 1)]); });
}

}  // namespace attnkit
