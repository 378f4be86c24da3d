#pragma once
// ScopedSetting: sets one of attnkit's settings for a scope and restores its earlier value on
// destruction, for every "…Scope" override (thread counts, conv2d engine, flash tile products).
namespace attnkit {

// Calls Set(value) on construction and Set(Get()'s value before it) on destruction. Scopes of
// one setting must nest; whether the setting is process-wide or per thread is Get/Set's.
template <class T, T (*Get)(), void (*Set)(T)>
class ScopedSetting {
 public:
  explicit ScopedSetting(T value) : saved_(Get()) { Set(value); }
  ~ScopedSetting() { Set(saved_); }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  T saved_;
};

}  // namespace attnkit
