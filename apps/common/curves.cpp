// SPDX-License-Identifier: BSD-3-Clause
#include "apps/common/curves.hpp"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <utility>

namespace actorps::apps {

std::string write_csv(const std::string& path,
                      const std::vector<epoch_report>& rs) {
  std::ofstream f{path};
  f << "epoch,train_loss,test_accuracy,samples_per_s,seconds\n";
  for (auto& r : rs)
    f << r.epoch << ',' << r.loss << ',' << r.accuracy << ',' << r.samples_per_s
      << ',' << r.seconds << '\n';
  return f ? std::string{} : "cannot write " + path;
}

step_csv::step_csv(const std::string& path) : path_(path), out_(path) {
  out_ << "step,epoch,train_loss,seconds\n";
  if (!out_)
    error_ = "cannot write " + path;
}

void step_csv::add(const step_report& r) {
  if (!error_.empty())
    return;
  if (r.epoch != epoch_) {
    out_.flush();
    epoch_ = r.epoch;
  }
  out_ << r.step << ',' << r.epoch << ',' << r.loss << ',' << r.seconds << '\n';
  if (!out_)
    error_ = "cannot write " + path_;
}

std::string step_csv::close() {
  if (error_.empty()) {
    out_.close();
    if (!out_)
      error_ = "cannot write " + path_;
  }
  return error_;
}

// Two small line charts side by side: training loss and test accuracy.
std::string write_svg(const std::string& path, const std::string& title,
                      const std::vector<epoch_report>& rs) {
  std::ofstream f{path};
  f << std::setprecision(3);
  const int w = 360, h = 240, pad = 40;
  f << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << 2 * w + pad
    << "\" height=\"" << h + 2 * pad
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << pad << "\" y=\"20\" font-size=\"14\">" << title
    << "</text>\n";
  auto chart = [&](int x0, const char* label, auto value, double lo, double hi,
                   const char* color) {
    f << "<g transform=\"translate(" << x0 << "," << pad << ")\">\n"
      << "<rect width=\"" << w - pad << "\" height=\"" << h - pad
      << "\" fill=\"none\" stroke=\"#999\"/>\n"
      << "<text x=\"0\" y=\"-6\">" << label << " (" << lo << " to " << hi
      << ")</text>\n<polyline fill=\"none\" stroke=\"" << color
      << "\" stroke-width=\"2\" points=\"";
    std::vector<std::pair<double, double>> points;
    for (size_t i = 0; i < rs.size(); ++i) {
      // One epoch: its point in the middle of the box.
      auto x = rs.size() == 1 ? 0.5 * (w - pad)
                              : double(i) / double(rs.size() - 1) * (w - pad);
      auto v = (value(rs[i]) - lo) / (hi - lo == 0 ? 1 : hi - lo);
      points.emplace_back(x, (1 - v) * (h - pad));
      f << points.back().first << ',' << points.back().second << ' ';
    }
    f << "\"/>\n";
    // A marker on every epoch: a single epoch draws no line at all.
    for (const auto& [x, y] : points)
      f << "<circle cx=\"" << x << "\" cy=\"" << y << "\" r=\"3\" fill=\""
        << color << "\"/>\n";
    f << "<text x=\"0\" y=\"" << h - pad + 16 << "\">epoch 1</text>"
      << "<text x=\"" << w - pad - 50 << "\" y=\"" << h - pad + 16
      << "\">epoch " << rs.size() << "</text>\n</g>\n";
  };
  double max_loss = 0;
  double min_acc = 1;
  for (auto& r : rs) {
    max_loss = std::max(max_loss, r.loss);
    min_acc = std::min(min_acc, r.accuracy);
  }
  chart(
    pad, "training loss", [](auto& r) { return r.loss; }, 0.0, max_loss,
    "#c0392b");
  chart(
    w + pad, "test accuracy", [](auto& r) { return r.accuracy; },
    std::max(0.0, min_acc - 0.05), 1.0, "#2471a3");
  f << "</svg>\n";
  return f ? std::string{} : "cannot write " + path;
}

} // namespace actorps::apps
