// Log lines a plugin or a host loader sends through a log callback (sm70ops_log_fn's shape:
// user data, level, message), kept for tests to search. Thread-safe: contexts log from any thread.
#ifndef SM70OPS_TESTS_ABI_LOG_CAPTURE_H_
#define SM70OPS_TESTS_ABI_LOG_CAPTURE_H_

#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "abi/sm70ops.h"

namespace sm70ops_test {

class LogCapture {
 public:
  // The callback; its user data is the LogCapture.
  static void Callback(void* self, sm70ops_log_level level, const char* message);
  // True when a line at `level` (or at any level when nullopt) contains `needle`.
  bool Has(const std::string& needle, std::optional<sm70ops_log_level> level = std::nullopt) const;
  std::string Dump() const;
  // The lines so far, in order (a copy: callbacks may still add to them).
  std::vector<std::pair<sm70ops_log_level, std::string>> Lines() const;
  void Clear();

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<sm70ops_log_level, std::string>> lines_;
};

}  // namespace sm70ops_test

#endif  // SM70OPS_TESTS_ABI_LOG_CAPTURE_H_
