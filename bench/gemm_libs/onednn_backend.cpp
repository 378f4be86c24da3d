// oneDNN (OpenMP runtime) through its matmul primitive, created once per problem (JIT) outside
// the timed region, with every operand in place with its strides. The "packed W" variant runs
// only when op(B) is a weight: the primitive chooses its own weight layout (format_tag::any) and
// the weights are reordered into it once, as a model could do once per optimizer step.
#include <dnnl.hpp>

#include "backends.hpp"

namespace gemm_libs {
namespace {

using dnnl::memory;

memory::desc strided(int64_t rows, int64_t cols, bool trans, int64_t ld) {
  // op(X) [rows, cols] of a row-major X with row stride ld (X is [cols, rows] when trans)
  return memory::desc({rows, cols}, memory::data_type::f32,
                      trans ? memory::dims{1, ld} : memory::dims{ld, 1});
}

class OneDnnRunner : public Runner {
 public:
  OneDnnRunner(dnnl::engine& eng, const Problem& p, Operands& o, bool pack) : eng_(eng), strm_(eng) {
    const auto a_md = strided(p.m, p.k, p.ta, o.lda), b_plain = strided(p.k, p.n, p.tb, o.ldb);
    const auto c_md = strided(p.m, p.n, false, o.ldc);
    const auto b_md = pack
                          ? memory::desc({p.k, p.n}, memory::data_type::f32, memory::format_tag::any)
                          : b_plain;
    dnnl::primitive_attr attr;
    if (p.beta != 0) {
      dnnl::post_ops po;
      po.append_sum(p.beta);
      attr.set_post_ops(po);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, eng_);
    prim_ = dnnl::matmul(pd);
    a_ = memory(a_md, eng_, o.a.data());
    c_ = memory(c_md, eng_, o.c.data());
    memory b_user(b_plain, eng_, o.b.data());
    if (pd.weights_desc() == b_plain) {
      b_ = b_user;
    } else {  // packed once, outside the timed region
      b_ = memory(pd.weights_desc(), eng_);
      dnnl::reorder(b_user, b_).execute(strm_, b_user, b_);
      strm_.wait();
    }
    impl_ = pd.impl_info_str();
  }
  void run(int threads) override {
    OmpThreads scope(threads);
    prim_.execute(strm_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
    strm_.wait();
  }
  const std::string& impl() const { return impl_; }

 private:
  dnnl::engine& eng_;
  dnnl::stream strm_;
  dnnl::matmul prim_;
  memory a_, b_, c_;
  std::string impl_;
};

class OneDnn : public Library {
 public:
  explicit OneDnn(bool pack) : pack_(pack) {}
  std::string name() const override { return pack_ ? "oneDNN packed W" : "oneDNN"; }
  std::unique_ptr<Runner> prepare(const Problem& p, Operands& o) override {
    if (pack_ && !p.b_is_weight) return nullptr;  // only weights may be packed ahead of the call
    return std::make_unique<OneDnnRunner>(eng_, p, o, pack_);
  }

 private:
  bool pack_;
  dnnl::engine eng_{dnnl::engine::kind::cpu, 0};
};

}  // namespace

std::unique_ptr<Library> make_onednn(bool pack) { return std::make_unique<OneDnn>(pack); }

}  // namespace gemm_libs
