#pragma once
// Deformable vs dense attention scaling (`attnkit bench deformable`): time of multi-scale
// deformable attention (K = Lv·P sampled points per query and head) and of flash attention over
// the same N tokens, for a list of N; log-log slopes and the crossover N, all in one run.
#include <cstdint>
#include <vector>

namespace attnkit {

struct DeformableBenchConfig {
  std::vector<int64_t> sides = {4, 8, 16, 32, 64, 96};  // finest level's side; levels halve it
  int64_t heads = 8, head_dim = 32, levels = 4, points = 4;
  bool uniform = false;      // locations uniform over each map instead of near the query
  bool backward = false;     // also time both backwards
  int threads = 0;           // 0 = all cores
  double min_seconds = 0.05; // each timing repeats a call until this much time has passed
  int repeats = 3;           // timings per size; the best is reported
  int64_t fit_min_n = 256;   // slopes are fitted over sizes with N >= this (small N: overheads)
};

struct DeformableBenchRow {
  int64_t n = 0;                          // tokens = queries = Σ H_l·W_l (encoder self-attention)
  double deform_ms = 0, dense_ms = 0;     // forward, best of repeats
  double deform_bwd_ms = 0, dense_bwd_ms = 0;  // 0 unless config.backward
  double deform_gbps = 0;                 // gathered corner rows (4·Dh floats per point) per second
  double dense_gflops = 0;                // 4·Dh·N² per head (forward)
};

// y ≈ a + slope·x fitted by least squares on (log n, log ms).
struct LogLogFit {
  double slope = 0, intercept = 0;
};

struct DeformableBenchResult {
  std::vector<DeformableBenchRow> rows;
  LogLogFit deform_fit, dense_fit;        // forward times
  double crossover_n = 0;                 // N where the fitted lines cross (deformable faster above)
  int64_t first_faster_n = 0;             // smallest measured N where deformable was faster; 0: none
  double read_gbps = 0;                   // measured memory read bandwidth, same threads
  double sgemm_gflops = 0;                // measured OpenBLAS sgemm, same threads
  int threads = 0;
};

// Sampling locations [1, N, H, Lv, P, 2] for encoder self-attention over the levels in
// `spatial_shapes` ([Lv, 2] row-major): query t's reference point is its own pixel centre,
// normalised; point p of head h sits (p + 1) pixels along angle 2πh/H (Deformable DETR's
// initial pattern) plus uniform noise of ±0.5 pixel on each level. `uniform`: anywhere in [0, 1]².
std::vector<float> deformable_bench_locations(const std::vector<int64_t>& spatial_shapes,
                                              int64_t heads, int64_t points, bool uniform,
                                              uint32_t seed);

// Least-squares line through (log x, log y).
LogLogFit fit_log_log(const std::vector<double>& x, const std::vector<double>& y);
// Runs the benchmark; throws attnkit::Error for impossible configurations.
DeformableBenchResult run_deformable_bench(const DeformableBenchConfig& config);

}  // namespace attnkit
