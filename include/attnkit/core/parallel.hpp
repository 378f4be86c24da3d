#pragma once
// Threading: the only place attnkit talks to OpenMP. The loops give each thread a contiguous span
// of the indices, run in order, and let a thread that finishes early take the others' last
// indices; callers write results to disjoint places so results never depend on the thread count.
#include <cstdint>
#include <functional>
#include <vector>

#include "attnkit/core/scoped_setting.hpp"

namespace attnkit {

// Upper bound on any thread count attnkit accepts or reports.
inline constexpr int kMaxThreads = 1024;
// Number of threads parallel_for and sgemm use: set_num_threads's value, else OMP_NUM_THREADS (its
// first value) when set, else the CPUs in this process's affinity mask. Never OpenMP's runtime
// default, which other libraries in the process change (importing PyTorch sets it to 1).
int num_threads();
// Where num_threads() comes from: "set_num_threads", "OMP_NUM_THREADS" or "CPU affinity".
const char* num_threads_source();
// Sets the threads parallel_for and sgemm use (clamped to kMaxThreads); n <= 0 restores the default.
void set_num_threads(int n);
// set_num_threads's current value; 0 when the default applies.
int num_threads_override();
// Index of the calling thread inside parallel_for, in [0, num_threads()); 0 outside.
int thread_index();
// Calls body(i) for every i in [0, n): thread t first runs, in order, the t-th of num_threads()
// spans of about n / num_threads() consecutive indices, then takes what is left of the other spans
// one index at a time from their ends. So consecutive loops over the same data give each thread the
// same part of it, which stays in that core's caches, and a thread held up loses the end of its
// span to the others.
void parallel_for(int64_t n, const std::function<void(int64_t)>& body);
// parallel_for_spans over groups of consecutive indices, each group run by one thread in order: a
// group closes once the cost(i) of its indices add up to min_cost (any unit), or to
// 1/(4·num_threads()) of the total if that is less, so each thread still gets about four groups;
// the last group may cost less. For many small items, which one at a time would each pay for a
// claim and, taken from the others' ends, interleave neighbouring writes between threads.
void parallel_for_grouped(int64_t n, const std::function<double(int64_t)>& cost, double min_cost,
                          const std::function<void(int64_t)>& body);
// parallel_for_grouped's groups for `threads` threads: boundaries 0 = b_0 < b_1 < ... < b_k = n,
// group g being [b_g, b_{g+1}); {0} when n <= 0.
std::vector<int64_t> group_bounds(int64_t n, const std::function<double(int64_t)>& cost,
                                  double min_cost, int threads);

// parallel_for with spans of about equal total cost(i) (span_bounds) instead of equal counts.
void parallel_for_spans(int64_t n, const std::function<double(int64_t)>& cost,
                        const std::function<void(int64_t)>& body);
// parallel_for_spans' spans for `threads` threads: 0 = s_0 <= s_1 <= ... <= s_threads = n, span t
// being [s_t, s_{t+1}). Index i goes to the span in which the middle of its cost falls, the total
// cost cut in `threads` equal parts (equal counts when every cost is 0).
std::vector<int64_t> span_bounds(int64_t n, const std::function<double(int64_t)>& cost, int threads);

// Scoped process-wide override of the thread count (set_num_threads), restored on destruction.
using ThreadCountScope = ScopedSetting<int, num_threads_override, set_num_threads>;

// OpenMP's thread count for the calling thread's next parallel region (omp_get_max_threads).
int openmp_threads();
// Sets it (omp_set_num_threads; n <= 0 means 1).
void set_openmp_threads(int n);
// Scoped OpenMP thread count of the calling thread, for third-party code that sizes its own OpenMP
// regions from it, such as oneDNN: attnkit sets it to the threads it hands that code, whatever else
// set it before.
using OpenMpThreadsScope = ScopedSetting<int, openmp_threads, set_openmp_threads>;

}  // namespace attnkit
