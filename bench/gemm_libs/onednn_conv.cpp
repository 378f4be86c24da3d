// oneDNN's own convolution (forward, 3×3 or 1×1, stride 1, "same" padding) as a runner for
// bench/gemm_libs: the primitive picks its activation and weight layouts (format_tag::any);
// input and weights are reordered into them once, outside the timed region, as a network kept in
// oneDNN's layouts would hold them.
#include <dnnl.hpp>

#include "conv_runner.hpp"

namespace gemm_libs {
namespace {

using dnnl::memory;

class ConvRunner : public Runner {
 public:
  explicit ConvRunner(const ConvShape& s) : strm_(eng_) {
    const int64_t pad = s.kernel / 2;
    const auto any = memory::format_tag::any;
    const memory::desc src({s.n, s.c, s.h, s.w}, memory::data_type::f32, any);
    const memory::desc wei({s.o, s.c, s.kernel, s.kernel}, memory::data_type::f32, any);
    const memory::desc dst({s.n, s.o, s.h, s.w}, memory::data_type::f32, any);
    const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                            dnnl::algorithm::convolution_direct, src, wei, dst,
                                            {1, 1}, {pad, pad}, {pad, pad});
    const dnnl::convolution_forward::primitive_desc pd(d, eng_);
    prim_ = dnnl::convolution_forward(pd);
    src_ = memory(pd.src_desc(), eng_);
    wei_ = memory(pd.weights_desc(), eng_);
    dst_ = memory(pd.dst_desc(), eng_);
    fill(src_, memory::desc({s.n, s.c, s.h, s.w}, memory::data_type::f32, memory::format_tag::nchw));
    fill(wei_, memory::desc({s.o, s.c, s.kernel, s.kernel}, memory::data_type::f32,
                            memory::format_tag::oihw));
  }
  void run(int threads) override {
    OmpThreads scope(threads);
    prim_.execute(strm_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, wei_}, {DNNL_ARG_DST, dst_}});
    strm_.wait();
  }

 private:
  // Plain-layout values in [-1, 1) reordered into m's layout.
  void fill(memory& m, const memory::desc& plain) {
    memory user(plain, eng_);
    float* p = static_cast<float*>(user.get_data_handle());
    const size_t count = plain.get_size() / sizeof(float);
    for (size_t i = 0; i < count; ++i) p[i] = float(int64_t((i * 2654435761u) % 2001) - 1000) * 1e-3f;
    dnnl::reorder(user, m).execute(strm_, user, m);
    strm_.wait();
  }

  dnnl::engine eng_{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm_;
  dnnl::convolution_forward prim_;
  memory src_, wei_, dst_;
};

}  // namespace

std::unique_ptr<Runner> make_onednn_conv(const ConvShape& s) { return std::make_unique<ConvRunner>(s); }

}  // namespace gemm_libs
