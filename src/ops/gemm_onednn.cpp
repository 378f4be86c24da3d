// One single-threaded oneDNN matmul (oneDNN 2.x, OpenMP runtime) for sgemm's oneDNN path.
// Each thread keeps its own primitives (keyed by shape, transposes, strides, alpha, beta) and
// its own stream, so no primitive is executed by two threads at once; oneDNN's own primitive
// cache shares the JIT code between them. Operands are passed in place with their strides; alpha
// is an output scale and beta a sum post-op (C = alpha·op(A)·op(B) + beta·C).
// Threads: the primitive sizes itself from omp_get_max_threads() at execution, which is set to 1
// for the call and restored afterwards (the caller's OpenMP value is left as it was).
#include "ops/gemm_onednn.hpp"

#include <omp.h>

#include <dnnl.hpp>
#include <map>
#include <tuple>

namespace attnkit::detail {
namespace {

using dnnl::memory;

// op(X) [rows, cols] of a row-major X with row stride ld (X stored [cols, rows] when trans).
memory::desc strided(int64_t rows, int64_t cols, bool trans, int64_t ld) {
  return memory::desc({rows, cols}, memory::data_type::f32,
                      trans ? memory::dims{1, ld} : memory::dims{ld, 1});
}

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

struct Matmul {
  dnnl::matmul prim;
  memory a, b, c;  // descriptors bound once; data handles set per call
};

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;

Matmul make_matmul(const Key& key) {
  const auto [ta, tb, m, n, k, lda, ldb, ldc, alpha, beta] = key;
  const auto a_md = strided(m, k, ta, lda), b_md = strided(k, n, tb, ldb);
  const auto c_md = strided(m, n, false, ldc);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine());
  return {dnnl::matmul(pd), memory(a_md, engine(), nullptr), memory(b_md, engine(), nullptr),
          memory(c_md, engine(), nullptr)};
}

}  // namespace

void onednn_sgemm_1thread(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                          float* c, int64_t ldc) {
  constexpr size_t kMaxCached = 256;  // shapes per thread; a model uses a few dozen
  thread_local std::map<Key, Matmul> cache;
  thread_local dnnl::stream stream(engine());
  const Key key{ta, tb, m, n, k, lda, ldb, ldc, alpha, beta};
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= kMaxCached) cache.clear();
    it = cache.emplace(key, make_matmul(key)).first;
  }
  Matmul& mm = it->second;
  mm.a.set_data_handle(const_cast<float*>(a));
  mm.b.set_data_handle(const_cast<float*>(b));
  mm.c.set_data_handle(c);
  const int saved = omp_get_max_threads();
  if (saved != 1) omp_set_num_threads(1);
  mm.prim.execute(stream, {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}});
  stream.wait();
  if (saved != 1) omp_set_num_threads(saved);
}

}  // namespace attnkit::detail
