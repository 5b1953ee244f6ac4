#include "tests/abi/log_capture.h"

namespace sm70ops_test {

void LogCapture::Callback(void* self, sm70ops_log_level level, const char* message) {
  auto* capture = static_cast<LogCapture*>(self);
  std::lock_guard<std::mutex> lock(capture->mu_);
  capture->lines_.emplace_back(level, message);
}

bool LogCapture::Has(const std::string& needle, std::optional<sm70ops_log_level> level) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [line_level, text] : lines_) {
    if ((!level || *level == line_level) && text.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string LogCapture::Dump() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [level, text] : lines_) out += "[" + std::to_string(level) + "] " + text + "\n";
  return out;
}

std::vector<std::pair<sm70ops_log_level, std::string>> LogCapture::Lines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_;
}

void LogCapture::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  lines_.clear();
}

}  // namespace sm70ops_test
