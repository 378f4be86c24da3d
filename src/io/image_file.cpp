// Grey-scale image decoding with stb_image, and bilinear resizing (see image_file.hpp).
#include "attnkit/io/image_file.hpp"

#include <stb/stb_image.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>

#include "attnkit/core/error.hpp"
#include "attnkit/core/file_io.hpp"

namespace attnkit {

namespace {

// stb's reason for the last failure, or what can be said without it.
std::string failure_reason(const std::string& path) {
  if (stbi_failure_reason()) return stbi_failure_reason();
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size == 0) return "the file is empty";
  return "unrecognised format or damaged header";
}

// Binary PGM/PPM (P5/P6): stb decodes a file whose pixel data is cut short, or whose maxval is
// 0, without an error, so the header is read here and the file's size checked against it.
void check_binary_pnm(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[2] = {};
  if (!f.read(magic, 2) || magic[0] != 'P' || (magic[1] != '5' && magic[1] != '6')) return;
  int64_t fields[3] = {};  // width, height, maxval
  for (int64_t& v : fields) {
    int ch = f.get();
    while (ch == '#' || std::isspace(ch)) {  // whitespace and comment lines before each field
      if (ch == '#') while (ch != EOF && ch != '\n') ch = f.get();
      ch = f.get();
    }
    check(ch != EOF && std::isdigit(ch), path, ": damaged PGM/PPM header");
    for (; ch != EOF && std::isdigit(ch); ch = f.get()) v = std::min<int64_t>(v * 10 + (ch - '0'), int64_t(1) << 40);
  }
  check(fields[2] >= 1 && fields[2] <= 65535, path, ": PGM/PPM maxval ", fields[2], " is outside 1..65535");
  const int64_t data_at = int64_t(f.tellg());  // one whitespace byte after maxval was consumed
  const int64_t need = fields[0] * fields[1] * (magic[1] == '5' ? 1 : 3) * (fields[2] > 255 ? 2 : 1);
  std::error_code ec;
  const auto size = int64_t(std::filesystem::file_size(path, ec));
  check(ec || data_at < 0 || size - data_at >= need, path, ": PGM/PPM pixel data is cut short (",
        std::max<int64_t>(0, size - data_at), " of ", need, " bytes)");
}

}  // namespace

GreyImage read_grey_image(const std::string& path) {
  check_readable_file(path);
  check_binary_pnm(path);
  int w = 0, h = 0, c = 0;
  check(stbi_info(path.c_str(), &w, &h, &c) == 1, path, ": not a readable PNG, PGM/PPM, JPEG or BMP image (",
        failure_reason(path), ")");
  check(w >= 1 && h >= 1 && w <= kMaxImageSide && h <= kMaxImageSide, path, ": image size ", w, "x", h,
        " is outside 1..", kMaxImageSide);
  std::unique_ptr<stbi_uc, void (*)(void*)> data(stbi_load(path.c_str(), &w, &h, &c, 1), stbi_image_free);
  check(data != nullptr, path, ": cannot decode (", failure_reason(path), ")");
  GreyImage img;
  img.height = h, img.width = w, img.channels_in_file = c;
  img.pixels.assign(data.get(), data.get() + size_t(w) * size_t(h));
  return img;
}

GreyImage resize_bilinear(const GreyImage& in, int64_t height, int64_t width) {
  check(height >= 1 && width >= 1 && height <= kMaxImageSide && width <= kMaxImageSide,
        "resize_bilinear: target size ", height, "x", width, " is outside 1..", kMaxImageSide);
  check(in.height >= 1 && in.width >= 1 && in.height <= kMaxImageSide && in.width <= kMaxImageSide &&
            int64_t(in.pixels.size()) == in.height * in.width,
        "resize_bilinear: malformed input image");
  if (in.height == height && in.width == width) return in;
  GreyImage out;
  out.height = height, out.width = width, out.channels_in_file = in.channels_in_file;
  out.pixels.resize(size_t(height * width));
  const double sy = double(in.height) / double(height), sx = double(in.width) / double(width);
  for (int64_t i = 0; i < height; ++i) {
    const double y = std::clamp((double(i) + 0.5) * sy - 0.5, 0.0, double(in.height - 1));
    const int64_t y0 = int64_t(y), y1 = std::min(y0 + 1, in.height - 1);
    const double fy = y - double(y0);
    for (int64_t j = 0; j < width; ++j) {
      const double x = std::clamp((double(j) + 0.5) * sx - 0.5, 0.0, double(in.width - 1));
      const int64_t x0 = int64_t(x), x1 = std::min(x0 + 1, in.width - 1);
      const double fx = x - double(x0);
      auto p = [&](int64_t r, int64_t c) { return double(in.pixels[size_t(r * in.width + c)]); };
      const double v = (1 - fy) * ((1 - fx) * p(y0, x0) + fx * p(y0, x1)) +
                       fy * ((1 - fx) * p(y1, x0) + fx * p(y1, x1));
      out.pixels[size_t(i * width + j)] = uint8_t(std::clamp(std::lround(v), 0L, 255L));
    }
  }
  return out;
}

}  // namespace attnkit
