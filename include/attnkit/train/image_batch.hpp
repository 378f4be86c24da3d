#pragma once
// Mini-batches of grey-scale images for training and evaluation: pixels scaled to [0, 1] and
// standardised, optionally augmented the standard way for Fashion-MNIST / CIFAR-style data:
// a random crop of the image zero-padded by `pad` pixels on every side (equivalently, a random
// shift by up to ±pad pixels with zeros shifted in) and a horizontal flip with probability 1/2.
// torchvision: Compose([RandomCrop(rows, padding=pad), RandomHorizontalFlip(), ToTensor(),
// Normalize(mean, std)]); padding pixels are 0 before normalisation, as there.
// Augmentation is keyed by (seed, epoch, image index) with the counter-based RNG: the same batch
// is reproduced on any thread count and after a resume.
#include <cstdint>
#include <span>

#include "attnkit/core/tensor.hpp"
#include "attnkit/io/idx.hpp"

namespace attnkit {

struct ImageBatchOptions {
  float mean = 0.0f;   // subtracted after scaling pixels to [0, 1]
  float std = 1.0f;    // then divided by this (> 0)
  int64_t pad = 0;     // random-crop padding in pixels (0: no crop)
  bool flip = false;   // random horizontal flip
  uint64_t seed = 0;   // augmentation stream
  uint64_t epoch = 0;  // mixed into the key so each epoch sees new crops and flips
};

// Mean and standard deviation (population) of all pixels of ds scaled to [0, 1], in double.
std::pair<double, double> pixel_mean_std(const ImageDataset& ds);

// x[B, 1, rows, cols] = the images ds[indices[b]], scaled, augmented, standardised; labels[b] =
// their labels. Every index must be in [0, ds.count).
void image_batch(View4 x, std::span<int32_t> labels, const ImageDataset& ds,
                 std::span<const int64_t> indices, const ImageBatchOptions& opts = {});

}  // namespace attnkit
