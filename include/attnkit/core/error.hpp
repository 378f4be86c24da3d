#pragma once
// attnkit::Error: the one exception type thrown at API boundaries. Messages name the offending
// argument and give expected vs actual values; Python maps it to ValueError, the CLI prints one line.
#include <sstream>
#include <stdexcept>
#include <string>

namespace attnkit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Parts>
[[noreturn]] void throw_error(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}
}  // namespace detail

// Throws attnkit::Error with the concatenation of `parts` unless `cond` holds.
template <class... Parts>
inline void check(bool cond, const Parts&... parts) {
  if (!cond) detail::throw_error(parts...);
}

// Throws attnkit::Error with the concatenation of `parts`.
template <class... Parts>
[[noreturn]] inline void fail(const Parts&... parts) {
  detail::throw_error(parts...);
}

}  // namespace attnkit
