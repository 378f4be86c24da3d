#pragma once
// What the GEMM routing needs to know of OpenBLAS's kernel selection (blas_kernels.cpp). Internal.

namespace attnkit {

// True when the OpenBLAS kernel table in use has AVX-512 kernels (SkylakeX, Cooperlake,
// SapphireRapids); false for AVX2 and older tables, e.g. Haswell chosen by OPENBLAS_CORETYPE on an
// AVX-512 CPU.
bool blas_kernels_avx512();

}  // namespace attnkit
