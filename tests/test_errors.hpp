#pragma once
// Checks on attnkit::Error for the C++ tests: the message a call throws, and "throws naming X".
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "attnkit/core/error.hpp"

namespace attnkit {

// The message of the attnkit::Error that f() throws, or "" if it returns normally.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Expects f() to throw attnkit::Error with `phrase` in its message.
template <class F>
void expect_error(F&& f, std::string_view phrase) {
  try {
    f();
    ADD_FAILURE() << "no error; wanted one containing: " << phrase;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

}  // namespace attnkit
