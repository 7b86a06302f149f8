// Element types of checkpoint tensors and backend buffers, and the scalar conversions between
// them. bf16 and f16 widen to float exactly, so a checkpoint loads losslessly into f32 or f64.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace flide {

enum class DType : uint8_t { DType_f32, DType_f64, DType_bf16, DType_f16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::DType_f32:
      return 4;
    case DType::DType_f64:
      return 8;
    case DType::DType_bf16:
    case DType::DType_f16:
      return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::DType_f32:
      return "f32";
    case DType::DType_f64:
      return "f64";
    case DType::DType_bf16:
      return "bf16";
    case DType::DType_f16:
      return "f16";
  }
  return "?";
}

inline float bf16_to_f32(uint16_t bits) {
  uint32_t wide = uint32_t(bits) << 16;
  float out;
  std::memcpy(&out, &wide, 4);
  return out;
}

// IEEE half -> float, subnormals and inf/nan included.
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

}  // namespace flide
