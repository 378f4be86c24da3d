#pragma once
// Reading single images for `attnkit classify`: PNG, PGM/PPM (binary or ASCII), JPEG and BMP
// through Debian's stb_image (libstb-dev), converted to 8-bit grey scale (stb's luma weights
// 77/150/29 of 256 for colour images; an alpha channel is dropped), and bilinear resizing.
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit {

// An 8-bit grey-scale image, row-major [height, width].
struct GreyImage {
  int64_t height = 0, width = 0;
  int channels_in_file = 0;      // 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA
  std::vector<uint8_t> pixels;
};

// Largest height or width of an image read or resized here.
inline constexpr int64_t kMaxImageSide = 16384;

// Decodes the image file at `path` to grey scale; throws attnkit::Error naming the file and
// stb's reason for unreadable, truncated or unsupported files, and for images larger than
// kMaxImageSide on a side.
GreyImage read_grey_image(const std::string& path);

// Resizes to height × width with bilinear interpolation (pixel centres aligned, as
// align_corners=False); returns the input unchanged when the size already matches. Sides of the
// input and the target must be in 1..kMaxImageSide (attnkit::Error otherwise).
GreyImage resize_bilinear(const GreyImage& image, int64_t height, int64_t width);

}  // namespace attnkit
