// libFuzzer target for the safetensors parser: any byte string must either validate or throw
// attnkit::Error, never crash, read out of bounds or hit UB. Accepted files are exercised further:
// every tensor's bytes, lookups by name, and the f32 conversion of F32/F16/BF16 tensors.
// Build and run: scripts/fuzz [seconds].
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "attnkit/core/error.hpp"
#include "attnkit/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  try {
    const attnkit::SafetensorsFile f = attnkit::SafetensorsFile::parse(file, "fuzz");
    uint64_t covered = 0;
    for (const attnkit::TensorInfo& info : f.tensors()) {
      const auto bytes = f.bytes(info);
      covered += bytes.size();
      if (f.find(info.name) != &info) std::abort();  // names are unique and indexed
      const auto dt = info.dtype;
      if (dt == attnkit::DType::f32 || dt == attnkit::DType::f16 || dt == attnkit::DType::bf16) {
        if (f.read_f32(info.name).size() != size_t(info.numel())) std::abort();
      }
    }
    // Validation promises the tensors tile the data section exactly.
    if (covered != f.data_size() || 8 + f.header_size() + f.data_size() != size) std::abort();
  } catch (const attnkit::Error&) {
    // rejected cleanly: the expected outcome for most inputs
  }
  return 0;
}
