// Cross-entropy fast path. Plain form: one row of logits per task (vectorised max and exp-sum on a
// per-thread copy). Fused LM head + loss (Liger's "fused linear cross-entropy", done for the CPU):
// the vocabulary is walked in chunks of kVocabChunk rows of W; for each chunk, tiles of kTokenTile
// valid tokens run in parallel: z = h·W_cᵀ + b_c by sgemm, then an online logsumexp
//   m' = max(m, max_v z_v),  s' = s·exp(m - m') + Σ_v exp(z_v - m')
// The backward recomputes each chunk's z, forms dz = (exp(z - lse) - onehot)·d_loss/n in a
// [n, kVocabChunk] buffer, accumulates d_h += dz·W_c per token tile, then d_W_c += dzᵀ·h and
// d_b_c += Σ_t dz on parallel_sgemm tiles. Chunks run in order, so every sum has a fixed order.
// PyTorch: F.cross_entropy(h @ W.T + b, targets, ignore_index=-100).
#include "attnkit/nn/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/core/workspace.hpp"
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/vec_math.hpp"
#include "nn_common.hpp"

namespace attnkit {
namespace nn {

void check_targets(const char* fn, std::span<const int32_t> targets, int64_t v) {
  for (size_t t = 0; t < targets.size(); ++t)
    check(targets[t] < v, fn, ": targets[", t, "] = ", targets[t],
          " is out of range: expected < V = ", v, " (or negative to ignore the token)");
}

void check_cross_entropy(const char* fn, ConstView2 logits, std::span<const int32_t> targets) {
  const int64_t t = int64_t(targets.size());
  check_matrix(logits, fn, "logits", "[T, V]", t, logits.shape[1]);
  check(logits.shape[1] >= 1 || t == 0, fn, ": logits: the vocabulary is empty (V = 0)");
  check_targets(fn, targets, logits.shape[1]);
}

void check_linear_cross_entropy(const char* fn, ConstView2 h, ConstView2 w,
                                std::span<const float> b, std::span<const int32_t> targets) {
  const int64_t t = int64_t(targets.size()), c = h.shape[1], v = w.shape[0];
  check_matrix(h, fn, "h", "[T, C]", t, c);
  check_matrix(w, fn, "w", "[V, C]", v, c);
  check(v >= 1 || t == 0, fn, ": w: the vocabulary is empty (V = 0)");
  check_span(b, fn, "b", "[V]", v, true);
  check_targets(fn, targets, v);
}

std::vector<int64_t> valid_rows(std::span<const int32_t> targets) {
  std::vector<int64_t> rows;
  for (size_t t = 0; t < targets.size(); ++t)
    if (targets[t] >= 0) rows.push_back(int64_t(t));
  return rows;
}

float mean_loss(std::span<float> losses, int64_t n_valid) {
  double sum = 0;
  for (float l : losses) sum += double(l);
  return n_valid ? float(sum / double(n_valid)) : 0.0f;
}

}  // namespace nn

namespace {

// Rows of h that carry a target, gathered into a contiguous [n, C] block (or h itself when every
// token is valid, so nothing is copied).
struct ValidRows {
  std::vector<int64_t> rows;
  std::vector<float> gathered;
  const float* data = nullptr;
  int64_t ld = 1;

  ValidRows(ConstView2 h, std::span<const int32_t> targets) : rows(nn::valid_rows(targets)) {
    const int64_t c = h.shape[1];
    if (int64_t(rows.size()) == h.shape[0]) {
      data = h.data;
      ld = nn::ld(h);
      return;
    }
    gathered.resize(rows.size() * size_t(c));
    for (size_t r = 0; r < rows.size(); ++r)
      std::copy_n(h.ptr(rows[r]), c, &gathered[r * size_t(c)]);
    data = gathered.data();
    ld = std::max<int64_t>(c, 1);
  }
  int64_t size() const { return int64_t(rows.size()); }
};

constexpr int64_t kChunk = CrossEntropyTiles::kVocabChunk;
constexpr int64_t kTile = CrossEntropyTiles::kTokenTile;

// z[rows, n] = h_tile·W[v0:v0+n]ᵀ + b[v0:v0+n] for valid rows [r0, r1).
void chunk_logits(const ValidRows& hv, ConstView2 w, std::span<const float> b, int64_t r0,
                  int64_t r1, int64_t v0, int64_t n, float* z) {
  const int64_t c = w.shape[1];
  sgemm(false, true, r1 - r0, n, c, 1.0f, hv.data + r0 * hv.ld, hv.ld, w.ptr(v0), nn::ld(w), 0.0f,
        z, n);
  if (b.empty()) return;
  for (int64_t r = 0; r < r1 - r0; ++r)
    for (int64_t j = 0; j < n; ++j) z[r * n + j] += b[size_t(v0 + j)];
}

}  // namespace

float cross_entropy_forward(std::span<float> losses, std::span<float> lse, ConstView2 logits,
                            std::span<const int32_t> targets) {
  const char* fn = "cross_entropy_forward";
  nn::check_cross_entropy(fn, logits, targets);
  nn::check_span(losses, fn, "losses", "[T]", int64_t(targets.size()));
  nn::check_span(lse, fn, "lse", "[T]", int64_t(targets.size()));
  const int64_t v = logits.shape[1];
  auto& spaces = thread_workspaces(sizeof(float) * size_t(v) + 64);
  nn::parallel_rows(int64_t(targets.size()), v, [&](int64_t t0, int64_t t1) {
    Workspace& ws = spaces[size_t(thread_index())];
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t target = targets[size_t(t)];
      if (target < 0) {
        losses[size_t(t)] = lse[size_t(t)] = 0.0f;
        continue;
      }
      ws.reset();
      float* z = ws.alloc<float>(size_t(v));
      std::copy_n(logits.ptr(t), v, z);
      const float m = row_max(z, v);
      const float l = m + std::log(exp_sub_sum(z, v, m));
      lse[size_t(t)] = l;
      losses[size_t(t)] = l - logits(t, target);
    }
  });
  return nn::mean_loss(losses, int64_t(nn::valid_rows(targets).size()));
}

void cross_entropy_backward(View2 d_logits, ConstView2 logits, std::span<const int32_t> targets,
                            std::span<const float> lse, float d_loss) {
  const char* fn = "cross_entropy_backward";
  nn::check_cross_entropy(fn, logits, targets);
  nn::check_matrix(d_logits, fn, "d_logits", "[T, V]", logits.shape[0], logits.shape[1]);
  nn::check_span(lse, fn, "lse", "[T]", int64_t(targets.size()));
  const int64_t v = logits.shape[1], n_valid = int64_t(nn::valid_rows(targets).size());
  const float scale = n_valid ? float(double(d_loss) / double(n_valid)) : 0.0f;
  auto& spaces = thread_workspaces(sizeof(float) * size_t(v) + 64);
  nn::parallel_rows(int64_t(targets.size()), v, [&](int64_t t0, int64_t t1) {
    Workspace& ws = spaces[size_t(thread_index())];
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t target = targets[size_t(t)];
      float* d = d_logits.ptr(t);
      if (target < 0) {
        std::fill_n(d, v, 0.0f);
        continue;
      }
      ws.reset();
      float* p = ws.alloc<float>(size_t(v));
      std::copy_n(logits.ptr(t), v, p);   // copy first: d_logits may alias logits
      exp_sub_sum(p, v, lse[size_t(t)]);  // softmax = exp(z - lse)
      for (int64_t j = 0; j < v; ++j) d[j] = p[j] * scale;
      d[target] -= scale;
    }
  });
}

float linear_cross_entropy_forward(std::span<float> losses, std::span<float> lse, ConstView2 h,
                                   ConstView2 w, std::span<const float> b,
                                   std::span<const int32_t> targets) {
  const char* fn = "linear_cross_entropy_forward";
  nn::check_linear_cross_entropy(fn, h, w, b, targets);
  nn::check_span(losses, fn, "losses", "[T]", int64_t(targets.size()));
  nn::check_span(lse, fn, "lse", "[T]", int64_t(targets.size()));
  std::fill(losses.begin(), losses.end(), 0.0f);
  std::fill(lse.begin(), lse.end(), 0.0f);
  const ValidRows hv(h, targets);
  const int64_t n = hv.size(), v = w.shape[0], tiles = (n + kTile - 1) / kTile;
  if (n == 0) return 0.0f;
  std::vector<float> m(size_t(n), -INFINITY), z_target(size_t(n), 0.0f);
  std::vector<double> s(size_t(n), 0.0);
  auto& spaces = thread_workspaces(sizeof(float) * size_t(kTile * kChunk) + 64);
  BlasThreadsScope blas(1);
  for (int64_t v0 = 0; v0 < v; v0 += kChunk) {
    const int64_t nv = std::min(kChunk, v - v0);
    parallel_for(tiles, [&](int64_t tile) {
      Workspace& ws = spaces[size_t(thread_index())];
      ws.reset();
      float* z = ws.alloc<float>(size_t(kTile * kChunk));
      const int64_t r0 = tile * kTile, r1 = std::min(n, r0 + kTile);
      chunk_logits(hv, w, b, r0, r1, v0, nv, z);
      for (int64_t r = r0; r < r1; ++r) {
        float* zr = z + (r - r0) * nv;
        const int64_t target = targets[size_t(hv.rows[size_t(r)])];
        if (target >= v0 && target < v0 + nv) z_target[size_t(r)] = zr[target - v0];
        const float m_new = std::max(m[size_t(r)], row_max(zr, nv));
        const double rescale = std::exp(double(m[size_t(r)]) - double(m_new));  // 0 at first
        s[size_t(r)] = s[size_t(r)] * rescale + double(exp_sub_sum(zr, nv, m_new));
        m[size_t(r)] = m_new;
      }
    });
  }
  for (int64_t r = 0; r < n; ++r) {
    const size_t t = size_t(hv.rows[size_t(r)]);
    lse[t] = float(double(m[size_t(r)]) + std::log(s[size_t(r)]));
    losses[t] = lse[t] - z_target[size_t(r)];
  }
  return nn::mean_loss(losses, n);
}

void linear_cross_entropy_backward(View2 d_h, View2 d_w, std::span<float> d_b, ConstView2 h,
                                   ConstView2 w, std::span<const float> b,
                                   std::span<const int32_t> targets, std::span<const float> lse,
                                   float d_loss) {
  const char* fn = "linear_cross_entropy_backward";
  nn::check_linear_cross_entropy(fn, h, w, b, targets);
  nn::check_matrix(d_h, fn, "d_h", "[T, C]", h.shape[0], h.shape[1]);
  if (nn::present(d_w)) nn::check_matrix(d_w, fn, "d_w", "[V, C]", w.shape[0], w.shape[1]);
  check(!(b.empty() && !d_b.empty()), fn, ": d_b: given but the head has no bias (b empty)");
  nn::check_span(std::span<const float>(d_b), fn, "d_b", "[V]", w.shape[0], true);
  nn::check_span(lse, fn, "lse", "[T]", int64_t(targets.size()));
  const ValidRows hv(h, targets);
  const int64_t n = hv.size(), v = w.shape[0], c = h.shape[1], tiles = (n + kTile - 1) / kTile;
  // d_h accumulates over chunks: in place when every row is valid, else in a compact buffer.
  const bool compact = n != h.shape[0];
  std::vector<float> dh_compact(compact ? size_t(n * c) : 0, 0.0f);
  float* dh = compact ? dh_compact.data() : d_h.data;
  const int64_t ld_dh = compact ? std::max<int64_t>(c, 1) : nn::ld(d_h);
  for (int64_t t = 0; t < h.shape[0]; ++t) std::fill_n(d_h.ptr(t), c, 0.0f);
  if (n == 0) return;
  const float scale = float(double(d_loss) / double(n));
  std::vector<float> dz(size_t(n * std::min(kChunk, v)));
  BlasThreadsScope blas(1);
  for (int64_t v0 = 0; v0 < v; v0 += kChunk) {
    const int64_t nv = std::min(kChunk, v - v0);
    parallel_for(tiles, [&](int64_t tile) {
      const int64_t r0 = tile * kTile, r1 = std::min(n, r0 + kTile);
      float* z = dz.data() + r0 * nv;
      chunk_logits(hv, w, b, r0, r1, v0, nv, z);
      for (int64_t r = r0; r < r1; ++r) {
        float* zr = z + (r - r0) * nv;
        const int64_t t = hv.rows[size_t(r)], target = targets[size_t(t)];
        exp_sub_sum(zr, nv, lse[size_t(t)]);  // softmax entries of this chunk
        scale_inplace(zr, nv, scale);
        if (target >= v0 && target < v0 + nv) zr[target - v0] -= scale;
      }
      sgemm(false, false, r1 - r0, c, nv, 1.0f, z, nv, w.ptr(v0), nn::ld(w), 1.0f, dh + r0 * ld_dh,
            ld_dh);
    });
    if (nn::present(d_w))
      nn::parallel_sgemm(true, false, nv, c, n, 1.0f, dz.data(), nv, hv.data, hv.ld, 1.0f,
                         d_w.ptr(v0), nn::ld(d_w));
    if (!d_b.empty())
      nn::parallel_columns(nv, [&](int64_t j0, int64_t j1) {
        std::vector<double> acc(size_t(j1 - j0), 0.0);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = j0; j < j1; ++j) acc[size_t(j - j0)] += double(dz[size_t(r * nv + j)]);
        for (int64_t j = j0; j < j1; ++j) d_b[size_t(v0 + j)] += float(acc[size_t(j - j0)]);
      });
  }
  if (compact)
    for (int64_t r = 0; r < n; ++r) std::copy_n(dh + r * c, c, d_h.ptr(hv.rows[size_t(r)]));
}

void logits_forward(View2 logits, ConstView2 h, ConstView2 w, std::span<const float> b) {
  const char* fn = "logits_forward";
  nn::check_matrix(h, fn, "h", "[T, C]", h.shape[0], h.shape[1]);
  nn::check_matrix(w, fn, "w", "[V, C]", w.shape[0], h.shape[1]);
  nn::check_matrix(logits, fn, "logits", "[T, V]", h.shape[0], w.shape[0]);
  nn::check_span(b, fn, "b", "[V]", w.shape[0], true);
  nn::matmul_bias(logits, h, w, b);
}

}  // namespace attnkit
