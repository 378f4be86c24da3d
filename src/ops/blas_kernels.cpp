// OpenBLAS kernel selection on CPUs newer than the installed OpenBLAS (see gemm.hpp,
// blas_kernels()). Debian 12's OpenBLAS 0.3.21 is built with DYNAMIC_ARCH: at load time it picks a
// kernel table by CPU model, and on models it does not know (Emerald Rapids, family 6 model 207,
// among others) it falls back to Prescott's SSE3 kernels, measured 2x slower than its SkylakeX
// kernels on this machine's CNN training. Before any BLAS call, when the user has not set
// OPENBLAS_CORETYPE and OpenBLAS chose a pre-AVX core on a CPU with AVX2 + FMA, this re-runs
// OpenBLAS's own selection with OPENBLAS_CORETYPE = SkylakeX (AVX-512 F/BW/VL/DQ) or Haswell.
// It uses OpenBLAS's exported `gotoblas` table pointer and gotoblas_dynamic_init(); both are weak
// references, so builds without DYNAMIC_ARCH simply keep their kernels.
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <string>

#include "attnkit/ops/gemm.hpp"
#include "ops/blas_kernels.hpp"

extern "C" {
extern void* gotoblas __attribute__((weak));               // gotoblas_t* of the kernel table
void gotoblas_dynamic_init(void) __attribute__((weak));    // selects a table if gotoblas is null
char* openblas_get_corename(void) __attribute__((weak));
}

namespace attnkit {
namespace {

bool pre_avx_core(const char* name) {
  for (const char* old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Unknown",
                          "Katmai", "Coppermine", "Northwood", "Banias"})
    if (std::strcmp(name, old) == 0) return true;
  return false;
}

// OpenBLAS kernel tables with 512-bit kernels (builds without DYNAMIC_ARCH report upper case).
bool avx512_core(const char* name) {
  for (const char* wide : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (strcasecmp(name, wide) == 0) return true;
  return false;
}

struct Selection {
  std::string note;
  bool avx512 = false;  // the kernel table in use has AVX-512 kernels
  Selection() {
    select();
    const char* in_use = openblas_get_corename ? openblas_get_corename() : nullptr;
    avx512 = in_use && avx512_core(in_use);
  }
  void select() {
    const char* detected = openblas_get_corename ? openblas_get_corename() : nullptr;
    if (!detected) {
      note = "OpenBLAS core unknown (no openblas_get_corename)";
      return;
    }
    note = std::string(detected) + " (OpenBLAS's choice)";
    if (std::getenv("OPENBLAS_CORETYPE")) {
      note = std::string(detected) + " (from OPENBLAS_CORETYPE)";
      return;
    }
    __builtin_cpu_init();
    if (!pre_avx_core(detected) || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !&gotoblas || !gotoblas_dynamic_init)
      return;
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    const char* choice = avx512 ? "SkylakeX" : "Haswell";
    setenv("OPENBLAS_CORETYPE", choice, 1);
    gotoblas = nullptr;
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
    note = std::string(openblas_get_corename()) + " (attnkit's choice: OpenBLAS picked " + detected +
           " on this CPU, which supports " + (avx512 ? "AVX-512" : "AVX2 + FMA") +
           "; set OPENBLAS_CORETYPE to override)";
  }
};

// Runs at load time (this object file is linked wherever sgemm is), before any BLAS call.
const Selection& selection() {
  static const Selection s;
  return s;
}
[[maybe_unused]] const Selection& at_load = selection();

}  // namespace

const std::string& blas_kernels() { return selection().note; }

bool blas_kernels_avx512() { return selection().avx512; }

}  // namespace attnkit
