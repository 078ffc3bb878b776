// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

/// Gradient compression filters: what each codec does to a pushed value
/// (the lossy step, done by the worker) and how the result is laid out on the
/// wire (a lossless packing of that result, done by the serializer). The
/// split keeps local and distributed stores exact twins: both see the same
/// quantized values; only the bytes on the wire differ. Free of CAF.
namespace actorps {

/// A compression codec for pushed gradients.
enum class codec : uint8_t {
  /// float32 as it is: 4 bytes a value.
  none = 0,
  /// BigDL's "FP16" (AllReduceParameter's FP16CompressedTensor): the upper
  /// 16 bits of each float32 (sign, 8 exponent bits, 7 mantissa bits), the
  /// lower 16 bits dropped (truncation toward zero, no rounding; the range
  /// of float32 is kept). 2 bytes a value.
  fp16 = 1,
  /// MXNet's 2-bit gradient compression with error feedback: each value is
  /// +threshold, -threshold or 0; what it left out is kept by the worker
  /// (the residual) and added to the next push of the same slice. 2 bits a
  /// value.
  two_bit = 2,
};

/// A codec and its parameter.
struct compression {
  codec kind = codec::none;
  /// `two_bit` only: the magnitude of a non-zero value (> 0, finite).
  float threshold = 0.5f;
};

/// Same codec, and for `two_bit` the same threshold.
bool operator==(const compression& x, const compression& y) noexcept;

inline bool operator!=(const compression& x, const compression& y) noexcept {
  return !(x == y);
}

/// "none", "fp16" or "2bit:<threshold>".
std::string to_string(const compression& x);

/// Parses "none", "fp16", "2bit" (threshold 0.5) or "2bit:<threshold>".
/// Returns nothing for any other text or a threshold that is not a finite
/// number > 0.
std::optional<compression> parse_compression(const std::string& text);

/// Empty if `x` is usable, else why not (e.g. a threshold <= 0).
std::string check(const compression& x);

/// fp16 in place: keeps the upper 16 bits of each value. A NaN stays a NaN
/// (truncating one could turn it into an infinity).
void quantize_fp16(float* x, std::size_t n);

/// 2-bit with error feedback, in place (MXNet's rule, per value i):
/// r[i] += x[i]; if r[i] >= t: x[i] = t, r[i] -= t; else if r[i] <= -t:
/// x[i] = -t, r[i] += t; else x[i] = 0. `residual` holds r, `n` values, all
/// 0 before a slice's first push.
void quantize_two_bit(float* x, float* residual, std::size_t n,
                      float threshold);

/// Applies `c` to `x` in place; `residual` is used by `two_bit` only.
void quantize(const compression& c, float* x, float* residual, std::size_t n);

/// Bytes `n` values take on the wire under `c`: 4n (none), 2n (fp16), or 4
/// bytes per started block of 16 values (two_bit, as MXNet).
std::size_t encoded_size(const compression& c, std::size_t n);

/// Writes `n` quantized values as `c` lays them out, `encoded_size(c, n)`
/// bytes:
/// - none: the float32s as they are (host byte order);
/// - fp16: the upper 16 bits of each float32 as a uint16 (host byte order);
/// - two_bit: value i in byte i / 4, bits 7-6 for i % 4 == 0 down to bits 1-0
///   for i % 4 == 3: 11 for +threshold, 10 for -threshold, 00 for 0; the
///   bits after the last value are 0.
/// Values that `quantize` did not produce are mapped as it would map them
/// with a zero residual (two_bit) or truncated (fp16).
void encode(const compression& c, const float* x, std::size_t n, uint8_t* out);

/// Reads `n` values that `encode` wrote (`encoded_size(c, n)` bytes). For
/// two_bit, the unused pattern 01 reads as 0 (as MXNet's dequantizer).
void decode(const compression& c, const uint8_t* in, std::size_t n, float* out);

} // namespace actorps
