// SPDX-License-Identifier: BSD-3-Clause
#include "core/checkpoint.hpp"
#include "core/checkpoint_codec.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <system_error>
#include <utility>

namespace actorps::core {

namespace {

constexpr char magic[8] = {'A', 'C', 'T', 'O', 'R', 'P', 'S', '\x01'};
constexpr size_t record_header_size = 8;
constexpr char end_tag[3] = {'E', 'N', 'D'};
constexpr size_t end_payload_size = sizeof(end_tag) + 8;

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> crc_table = make_crc_table();

// Integers are written byte by byte so that the format is little-endian on
// any host.
class writer {
public:
  explicit writer(std::vector<char>& buf) : buf_(buf) {
    // nop
  }

  void u8(uint8_t x) {
    buf_.push_back(static_cast<char>(x));
  }

  void u32(uint32_t x) {
    for (int i = 0; i < 4; ++i)
      buf_.push_back(static_cast<char>((x >> (8 * i)) & 0xFF));
  }

  void u64(uint64_t x) {
    for (int i = 0; i < 8; ++i)
      buf_.push_back(static_cast<char>((x >> (8 * i)) & 0xFF));
  }

  void f32(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    u32(bits);
  }

  void bytes(const char* data, size_t n) {
    buf_.insert(buf_.end(), data, data + n);
  }

  void str(const std::string& x) {
    assert(x.size() <= std::numeric_limits<uint32_t>::max());
    u32(static_cast<uint32_t>(x.size()));
    bytes(x.data(), x.size());
  }

  void f32_array(const std::vector<float>& xs) {
    u64(xs.size());
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    // The in-memory representation already is the file's: one bulk copy.
    auto first = reinterpret_cast<const char*>(xs.data());
    bytes(first, xs.size() * sizeof(float));
#else
    for (auto x : xs)
      f32(x);
#endif
  }

  void u64_array(const std::vector<uint64_t>& xs) {
    u64(xs.size());
    for (auto x : xs)
      u64(x);
  }

  /// Starts a record; returns the position to pass to `end_record`.
  size_t begin_record() {
    auto pos = buf_.size();
    buf_.resize(pos + record_header_size);
    return pos;
  }

  /// Fills in length and CRC of the record started at `pos`.
  void end_record(size_t pos) {
    auto payload = pos + record_header_size;
    auto len = buf_.size() - payload;
    // Callers check it first (check_encodable).
    assert(len <= std::numeric_limits<uint32_t>::max());
    auto crc = crc32(buf_.data() + payload, len);
    put_u32_at(pos, static_cast<uint32_t>(len));
    put_u32_at(pos + 4, crc);
  }

private:
  void put_u32_at(size_t pos, uint32_t x) {
    for (int i = 0; i < 4; ++i)
      buf_[pos + i] = static_cast<char>((x >> (8 * i)) & 0xFF);
  }

  std::vector<char>& buf_;
};

void write_optimizer(writer& out, const optimizer_config& x, bool settings) {
  out.str(x.name);
  out.f32(x.learning_rate);
  out.f32(x.momentum);
  out.f32(x.weight_decay);
  out.f32(x.rescale_grad);
  out.f32(x.clip_gradient);
  out.f32(x.beta1);
  out.f32(x.beta2);
  out.f32(x.epsilon);
  out.f32(x.rho);
  out.u8(x.ascent ? 1 : 0);
  // Added after the first release of the format: readers treat a record that
  // ends here as "constant" schedule.
  out.str(x.lr_schedule);
  out.u64(x.lr_updates);
  out.f32(x.lr_factor);
  out.f32(x.lr_final);
  // Added with load_optimizer_states' MXNet rule: the file was saved with
  // dump_optimizer (its settings replace the store's on that load). Written
  // only then, so that files saved without it read in older builds too.
  if (settings)
    out.u8(1);
}

void write_slice(writer& out, const slice_record& x) {
  out.u32(x.key_id);
  out.str(x.key);
  out.u32(x.part);
  out.u64(x.offset);
  out.u64(x.step);
  out.f32_array(x.value.data);
  out.f32_array(x.state.data);
  // Added with row tables: readers treat a record that ends here as one
  // without per-row steps.
  out.u64_array(x.row_steps);
  // Added with pieces: a record that ends here is a whole slice whose
  // key's number of parts is not known.
  out.u64(x.first);
  out.u64(x.total);
  out.u32(x.parts);
}

// Reads from [pos_, end_) and checks every length against what is left
// before using it, so arbitrary input can neither read out of bounds nor
// trigger a huge allocation. The first failure sticks: later reads fail too
// and `error()` says what went wrong first.
class reader {
public:
  reader(const char* first, size_t n) : pos_(first), end_(first + n) {
    // nop
  }

  size_t remaining() const noexcept {
    return static_cast<size_t>(end_ - pos_);
  }

  bool failed() const noexcept {
    return !error_.empty();
  }

  const std::string& error() const noexcept {
    return error_;
  }

  bool u8(uint8_t& x) {
    if (!take(1, "a byte"))
      return false;
    x = static_cast<uint8_t>(pos_[-1]);
    return true;
  }

  bool u32(uint32_t& x) {
    if (!take(4, "a u32"))
      return false;
    x = load_u32(pos_ - 4);
    return true;
  }

  bool u64(uint64_t& x) {
    if (!take(8, "a u64"))
      return false;
    x = 0;
    for (int i = 0; i < 8; ++i)
      x |= uint64_t{static_cast<unsigned char>(pos_[i - 8])} << (8 * i);
    return true;
  }

  bool f32(float& x) {
    uint32_t bits;
    if (!u32(bits))
      return false;
    std::memcpy(&x, &bits, sizeof(x));
    return true;
  }

  bool str(std::string& x) {
    uint32_t n;
    if (!u32(n))
      return false;
    if (n > remaining())
      return fail("string length " + std::to_string(n) + " exceeds the "
                  + std::to_string(remaining()) + " bytes left");
    x.assign(pos_, n);
    pos_ += n;
    return true;
  }

  bool f32_array(std::vector<float>& xs) {
    uint64_t n;
    if (!u64(n))
      return false;
    // Division instead of n * 4 so that a huge count cannot overflow.
    if (n > remaining() / sizeof(float))
      return fail("float count " + std::to_string(n) + " exceeds the "
                  + std::to_string(remaining()) + " bytes left");
    xs.resize(static_cast<size_t>(n));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n > 0)
      std::memcpy(xs.data(), pos_, xs.size() * sizeof(float));
    pos_ += xs.size() * sizeof(float);
#else
    for (auto& x : xs)
      f32(x);
#endif
    return true;
  }

  bool u64_array(std::vector<uint64_t>& xs) {
    uint64_t n;
    if (!u64(n))
      return false;
    if (n > remaining() / sizeof(uint64_t))
      return fail("count " + std::to_string(n) + " exceeds the "
                  + std::to_string(remaining()) + " bytes left");
    xs.resize(static_cast<size_t>(n));
    for (auto& x : xs)
      u64(x);
    return true;
  }

  bool fail(std::string what) {
    if (error_.empty())
      error_ = std::move(what);
    return false;
  }

  static uint32_t load_u32(const char* p) noexcept {
    uint32_t x = 0;
    for (int i = 0; i < 4; ++i)
      x |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
    return x;
  }

private:
  bool take(size_t n, const char* what) {
    if (failed())
      return false;
    if (n > remaining())
      return fail(std::string{"truncated: need "} + what + ", "
                  + std::to_string(remaining()) + " bytes left");
    pos_ += n;
    return true;
  }

  const char* pos_;
  const char* end_;
  std::string error_;
};

bool read_optimizer(reader& in, optimizer_config& x, bool& settings) {
  settings = false;
  uint8_t ascent = 0;
  bool ok = in.str(x.name) && in.f32(x.learning_rate) && in.f32(x.momentum)
            && in.f32(x.weight_decay) && in.f32(x.rescale_grad)
            && in.f32(x.clip_gradient) && in.f32(x.beta1) && in.f32(x.beta2)
            && in.f32(x.epsilon) && in.f32(x.rho) && in.u8(ascent);
  if (!ok)
    return false;
  if (ascent > 1)
    return in.fail("ascent flag is " + std::to_string(ascent)
                   + ", expected 0 or 1");
  x.ascent = ascent == 1;
  if (in.remaining() == 0)
    return true; // written before learning-rate schedules existed
  if (!(in.str(x.lr_schedule) && in.u64(x.lr_updates) && in.f32(x.lr_factor)
        && in.f32(x.lr_final)))
    return false;
  if (in.remaining() == 0)
    return true; // saved without dump_optimizer (or before it existed)
  uint8_t flag = 0;
  if (!in.u8(flag))
    return false;
  if (flag > 1)
    return in.fail("dump_optimizer flag is " + std::to_string(flag)
                   + ", expected 0 or 1");
  settings = flag == 1;
  return true;
}

bool read_slice(reader& in, slice_record& x) {
  bool ok = in.u32(x.key_id) && in.str(x.key) && in.u32(x.part)
            && in.u64(x.offset) && in.u64(x.step) && in.f32_array(x.value.data)
            && in.f32_array(x.state.data)
            && (in.remaining() == 0 || in.u64_array(x.row_steps))
            && (in.remaining() == 0
                || (in.u64(x.first) && in.u64(x.total) && in.u32(x.parts)));
  if (!ok)
    return false;
  auto n = x.value.data.size();
  if (x.total == 0 && x.first != 0)
    return in.fail("a whole slice starts at float " + std::to_string(x.first));
  if (x.total != 0 && (x.first > x.total || n > x.total - x.first))
    return in.fail("piece [" + std::to_string(x.first) + ", +"
                   + std::to_string(n) + ") lies outside its slice of "
                   + std::to_string(x.total) + " floats");
  return true;
}

status io_error(const char* what, const std::string& path, int err) {
  return status{errc::checkpoint_io, std::string{"checkpoint: cannot "} + what
                                       + " " + path + ": "
                                       + system_error_text(err)};
}

} // namespace

namespace codec {

const char* magic_bytes() noexcept {
  return magic;
}

void append_record(std::vector<char>& buf, const optimizer_config& x,
                   bool settings) {
  writer out{buf};
  auto pos = out.begin_record();
  write_optimizer(out, x, settings);
  out.end_record(pos);
}

void append_record(std::vector<char>& buf, const slice_record& x) {
  writer out{buf};
  auto pos = out.begin_record();
  write_slice(out, x);
  out.end_record(pos);
}

void append_end_record(std::vector<char>& buf, uint64_t count) {
  writer out{buf};
  auto pos = out.begin_record();
  out.bytes(end_tag, sizeof(end_tag));
  out.u64(count);
  out.end_record(pos);
}

uint32_t load_u32(const char* p) noexcept {
  return reader::load_u32(p);
}

namespace {

// Reads a whole payload with `read`; what is wrong, or "".
template <class T, class Read>
std::string parse_with(const char* payload, std::size_t len, T& x, Read read) {
  reader in{payload, len};
  if (!read(in, x))
    return in.error();
  if (in.remaining() != 0)
    return std::to_string(in.remaining())
           + " unexpected bytes at the end of the payload";
  return {};
}

} // namespace

std::string parse(const char* payload, std::size_t len, optimizer_config& x,
                  bool& settings) {
  return parse_with(payload, len, x,
                    [&settings](reader& in, optimizer_config& y) {
                      return read_optimizer(in, y, settings);
                    });
}

std::string parse(const char* payload, std::size_t len, slice_record& x) {
  return parse_with(payload, len, x, read_slice);
}

bool parse_end(const char* payload, std::size_t len, uint64_t& count) {
  if (len != end_payload_size
      || std::memcmp(payload, end_tag, sizeof(end_tag)) != 0)
    return false;
  reader tail{payload + sizeof(end_tag), len - sizeof(end_tag)};
  return tail.u64(count);
}

} // namespace codec

uint32_t crc32(const void* data, std::size_t n) noexcept {
  auto p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i)
    c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint64_t record_payload_size(std::size_t key_bytes, uint64_t values,
                             uint64_t state, uint64_t row_steps) noexcept {
  // key_id, key, part, offset, step, three counted arrays, first, total,
  // parts.
  return 4 + 4 + key_bytes + 4 + 8 + 8 + 8 + values * sizeof(float) + 8
         + state * sizeof(float) + 8 + row_steps * sizeof(uint64_t) + 8 + 8 + 4;
}

uint64_t record_payload_size(const slice_record& x) noexcept {
  return record_payload_size(x.key.size(), x.value.data.size(),
                             x.state.data.size(), x.row_steps.size());
}

status check_encodable(const slice_record& s) {
  auto n = record_payload_size(s);
  if (n > std::numeric_limits<uint32_t>::max())
    return {errc::checkpoint_io,
            "checkpoint: part " + std::to_string(s.part) + " of key '" + s.key
              + "' takes " + std::to_string(n >> 20)
              + " MiB with its optimizer state, more than a record holds "
                "(4 GiB): spread the key over more shards"};
  return {};
}

status check_encodable(const state_snapshot& snapshot) {
  for (const auto& s : snapshot.slices)
    if (auto st = check_encodable(s); !st.ok())
      return st;
  return {};
}

std::vector<char> encode_checkpoint(const state_snapshot& snapshot) {
  size_t total = sizeof(magic) + 2 * record_header_size + 64
                 + snapshot.optimizer.name.size() + end_payload_size;
  for (const auto& s : snapshot.slices)
    total += record_header_size + record_payload_size(s);
  std::vector<char> buf;
  buf.reserve(total);
  buf.insert(buf.end(), magic, magic + sizeof(magic));
  codec::append_record(buf, snapshot.optimizer);
  for (const auto& s : snapshot.slices)
    codec::append_record(buf, s);
  codec::append_end_record(buf, snapshot.slices.size());
  return buf;
}

status write_file_atomic(const std::string& path,
                         const std::vector<char>& bytes, file_system& fs) {
  auto failed = write_atomically(fs, path, bytes.data(), bytes.size());
  if (failed.err != 0)
    return status{errc::checkpoint_io, "checkpoint: " + failed.text()};
  return status{};
}

status read_file(const std::string& path, std::vector<char>& out,
                 file_system& fs) {
  std::unique_ptr<readable_file> file;
  if (int err = fs.open(path, file); err != 0)
    return io_error(err == EINVAL ? "read (not a regular file)" : "open", path,
                    err);
  // Sized from the file's size plus one byte, so that a file which does not
  // change is read without reallocation and EOF shows up on the first short
  // read. The loop still reads until EOF: the size is a hint only.
  auto hint = file->size_hint();
  std::vector<char> buf(hint > 0 ? hint + 1 : std::size_t{1} << 16);
  std::size_t used = 0;
  for (;;) {
    if (used == buf.size())
      buf.resize(buf.size() * 2);
    std::size_t got = 0;
    if (int err = file->read(buf.data() + used, buf.size() - used, got);
        err != 0)
      return io_error("read", path, err);
    if (got == 0)
      break;
    used += got;
  }
  buf.resize(used);
  out = std::move(buf);
  return status{};
}

} // namespace actorps::core
