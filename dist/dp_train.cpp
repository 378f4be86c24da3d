// Data-parallel training over MPI (see dp_train.hpp).
#include "attnkit/dist/dp_train.hpp"

#include "attnkit/core/error.hpp"

namespace attnkit::dist {

void configure_data_parallel(const MpiWorld& world, TrainOptions& o) {
  o.dp_rank = world.rank();
  o.dp_size = world.size();
  const float inv = 1.0f / float(world.size());
  o.dp_average = [inv](std::span<float> x) {
    all_reduce_sum(x);
    for (float& v : x) v *= inv;
  };
}

void check_replicas_in_sync(const MpiWorld& world, std::span<const float> params) {
  double sum = 0;
  for (float p : params) sum += double(p);
  const double total = all_reduce_sum(sum);
  check(total == sum * world.size(), "--dp: ranks ended with different parameters");
}

}  // namespace attnkit::dist
