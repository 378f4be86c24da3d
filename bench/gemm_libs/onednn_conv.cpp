// oneDNN's own convolution (forward, 3×3 or 1×1, stride 1, "same" padding) as a runner for
// bench/gemm_libs: the primitive picks its activation and weight layouts (format_tag::any);
// input and weights are reordered into them once, outside the timed region, as a network kept in
// oneDNN's layouts would hold them. oneDNN splits a primitive's work by the OpenMP thread count at
// its creation, so each thread count gets its own primitive, created under that count (on the
// first, untimed call of seconds_per_call).
#include <dnnl.hpp>

#include <map>
#include <optional>
#include <stdexcept>

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
    desc_.emplace(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, wei, dst,
                  memory::dims{1, 1}, memory::dims{pad, pad}, memory::dims{pad, pad});
    const dnnl::convolution_forward::primitive_desc pd(*desc_, eng_);
    src_ = memory(pd.src_desc(), eng_);
    wei_ = memory(pd.weights_desc(), eng_);
    dst_ = memory(pd.dst_desc(), eng_);
    fill(src_, memory::desc({s.n, s.c, s.h, s.w}, memory::data_type::f32, memory::format_tag::nchw));
    fill(wei_, memory::desc({s.o, s.c, s.kernel, s.kernel}, memory::data_type::f32,
                            memory::format_tag::oihw));
  }
  void run(int threads) override {
    OmpThreads scope(threads);
    auto it = prims_.find(threads);
    if (it == prims_.end()) {
      const dnnl::convolution_forward::primitive_desc pd(*desc_, eng_);
      check_layouts(pd);
      it = prims_.emplace(threads, dnnl::convolution_forward(pd)).first;
    }
    it->second.execute(strm_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, wei_}, {DNNL_ARG_DST, dst_}});
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
  // Layouts of a primitive created under another thread count must match the buffers'.
  void check_layouts(const dnnl::convolution_forward::primitive_desc& pd) const {
    if (pd.src_desc() != src_.get_desc() || pd.weights_desc() != wei_.get_desc() || pd.dst_desc() != dst_.get_desc())
      throw std::runtime_error("onednn_conv: layouts differ between thread counts");
  }

  std::optional<dnnl::convolution_forward::desc> desc_;
  std::map<int, dnnl::convolution_forward> prims_;  // per thread count
  memory src_, wei_, dst_;
};

}  // namespace

std::unique_ptr<Runner> make_onednn_conv(const ConvShape& s) { return std::make_unique<ConvRunner>(s); }

}  // namespace gemm_libs
