// conv2d's oneDNN engine: it runs on exactly attnkit's threads whatever OpenMP's default is (another
// library, such as PyTorch, may have set it), leaves that default as it found it, and gives
// bitwise the same results under any default. Built without oneDNN: selecting it is an error.
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "nn/vision_testing.hpp"

namespace attnkit {
namespace {

using vision_testing::Buf;

// Threads of this process now (entries of /proc/self/task).
int process_threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// y, d_x and d_w of a 16 → 16 channel 3×3 layer on 12 images of 10×10, by oneDNN on `threads`.
std::vector<float> run_layer(int threads) {
  const int64_t n = 12, c = 16, o = 16, s = 10;
  Buf x(n * c * s * s), w(o * c * 9), dy(n * o * s * s), y(n * o * s * s), dx(n * c * s * s), dw(o * c * 9);
  x.randn(1), w.randn(2, 0.5f), dy.randn(3);
  const Conv2dEngineScope engine(Conv2dEngine::kOneDnn);
  const ThreadCountScope scope(threads);
  const Conv2dOptions opts{.stride = 1, .padding = 1};
  conv2d_forward(y.v4({n, o, s, s}), x.c4({n, c, s, s}), w.c4({o, c, 3, 3}), {}, opts);
  conv2d_backward(dx.v4({n, c, s, s}), dw.v4({o, c, 3, 3}), {}, dy.c4({n, o, s, s}), x.c4({n, c, s, s}),
                  w.c4({o, c, 3, 3}), opts);
  std::vector<float> all(y.raw);
  all.insert(all.end(), dx.raw.begin(), dx.raw.end());
  all.insert(all.end(), dw.raw.begin(), dw.raw.end());
  return all;
}

TEST(Conv2dOneDnn, RunsOnAttnkitThreadsNotOpenMpDefault) {
  if (!conv2d_has_onednn()) GTEST_SKIP() << "built without oneDNN";
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = run_layer(1);  // also creates and caches the primitives
  // A default of 7 threads (more than any other test uses), as another library might set it:
  // oneDNN must neither start OpenMP threads for it nor change it.
  omp_set_num_threads(7);
  const int before = process_threads();
  const std::vector<float> with_default_7 = run_layer(1);
  EXPECT_EQ(process_threads(), before) << "oneDNN started threads beyond attnkit's one";
  EXPECT_EQ(omp_get_max_threads(), 7) << "OpenMP's default was not restored";
  const std::vector<float> two = run_layer(2);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, with_default_7);
  EXPECT_EQ(one, two);
}

TEST(Conv2dOneDnn, SelectingItWithoutOneDnnIsAnError) {
  if (conv2d_has_onednn()) GTEST_SKIP() << "built with oneDNN";
  EXPECT_THROW(set_conv2d_engine(Conv2dEngine::kOneDnn), Error);
  EXPECT_NE(conv2d_engine(), Conv2dEngine::kOneDnn);
}

}  // namespace
}  // namespace attnkit
