// SPDX-License-Identifier: BSD-3-Clause
#include "apps/common/progress.hpp"

#include <cmath>

#include <unistd.h>

namespace actorps::apps {

progress_printer::progress_printer(uint32_t epochs, line_sink sink)
  : epochs_(epochs),
    sink_(std::move(sink)),
    tty_(!sink_ && ::isatty(STDOUT_FILENO) == 1),
    start_(std::chrono::steady_clock::now()) {
  // nop
}

void progress_printer::line(const std::string& text) {
  if (sink_) {
    sink_(text);
    return;
  }
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

double progress_printer::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now()
                                       - start_)
    .count();
}

std::string progress_printer::clock_text(double seconds) {
  auto s = static_cast<long>(std::max(0.0, std::round(seconds)));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", s / 3600, s / 60 % 60,
                  s % 60);
  else
    std::snprintf(buf, sizeof(buf), "%ld:%02ld", s / 60, s % 60);
  return buf;
}

void progress_printer::update(const progress& p) {
  auto fraction = p.total == 0 ? 1.0 : double(p.done) / double(p.total);
  // The run so far, as a fraction of all its epochs, gives the time left.
  auto run
    = epochs_ == 0 ? 1.0 : (double(p.epoch) - 1.0 + fraction) / double(epochs_);
  auto spent = elapsed();
  auto eta = run > 0 ? spent / run - spent : 0.0;
  auto times = "elapsed " + clock_text(spent) + "  ETA " + clock_text(eta);
  if (tty_) {
    constexpr int width = 30;
    auto filled = static_cast<int>(fraction * width);
    std::printf("\repoch %2u/%u [%s%s] %3.0f%%  step %llu/%llu  loss %.4f  "
                "%6.0f samples/s  %s ",
                p.epoch, epochs_, std::string(filled, '#').c_str(),
                std::string(width - filled, '.').c_str(), fraction * 100,
                static_cast<unsigned long long>(p.step),
                static_cast<unsigned long long>(p.steps), p.loss,
                p.samples_per_s, times.c_str());
    std::fflush(stdout);
    return;
  }
  // Plain lines at each quarter of an epoch.
  auto quarter = static_cast<int>(fraction * 4);
  if (p.epoch != last_epoch_) {
    last_epoch_ = p.epoch;
    last_quarter_ = 0;
  }
  if (quarter > last_quarter_) {
    last_quarter_ = quarter;
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "epoch %2u/%u %3d%%  step %llu/%llu  loss %.4f  %.0f "
                  "samples/s  %s",
                  p.epoch, epochs_, quarter * 25,
                  static_cast<unsigned long long>(p.step),
                  static_cast<unsigned long long>(p.steps), p.loss,
                  p.samples_per_s, times.c_str());
    line(buf);
  }
}

void progress_printer::epoch_done(const epoch_report& r) {
  if (tty_)
    std::printf("\n");
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "epoch %2u/%u done: loss %.4f  test accuracy %.4f  %.0f "
                "samples/s  %.1f s  elapsed %s",
                r.epoch, epochs_, r.loss, r.accuracy, r.samples_per_s,
                r.seconds, clock_text(elapsed()).c_str());
  line(buf);
}

} // namespace actorps::apps
