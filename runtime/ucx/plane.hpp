// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// The UCX data plane of one process: the bytes of tensors between worker and
// shard processes, beside CAF's control channel (DESIGN.md, section 7). No
// CAF here: the actors reach it through runtime/, which turns its messages
// into typed ones.
//
// One UCX context and worker per plane. Callers send on their own thread (a
// small message leaves at once); one progress thread receives and finishes
// what UCX left pending, sleeping on UCX's event fd in between. Every UCX
// call holds the plane's lock. A peer is
// another plane, reached by the address bytes it published (through the
// coordinator, after its node was admitted). Both directions authenticate:
// the first message on every connection is a hello carrying an HMAC of the
// job's data secret (handed out over the authenticated control channel),
// and a connection that does not open with a valid hello is dropped, its
// data never read.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/values.hpp"
#include "runtime/ucx/segment.hpp"

namespace actorps::ucx {

/// Identifies a peer plane within this plane (never 0).
using peer_id = uint64_t;

/// Bytes to send, in pieces that travel back to back as one body; they
/// stay valid until the send that carries them completed.
struct payload {
  struct piece {
    const void* data = nullptr;
    std::size_t size = 0;
  };

  std::vector<piece> pieces;
  /// Keeps the pieces alive (may be empty when they outlive the plane).
  std::shared_ptr<const void> keep;

  payload() = default;

  /// One piece.
  payload(const void* data, std::size_t size,
          std::shared_ptr<const void> keep = nullptr);

  /// Several pieces (empty ones are skipped).
  payload(std::vector<piece> pieces, std::shared_ptr<const void> keep);

  /// Bytes in all pieces.
  std::size_t size() const;

  /// Copies the pieces back to back to `out` (room for `size()` bytes).
  void copy_to(char* out) const;
};

/// A received body: its bytes in storage aligned for floats, so that a
/// body of floats becomes a `std::vector<float>` without a copy; or a view
/// of bytes that lie elsewhere (a message in a peer's shared-memory
/// segment, read where it lies), which another process may still write:
/// read each byte once (copy it out before checking it), never write it.
class buffer {
public:
  buffer() = default;

  /// `size` bytes to be written through `data` (what they hold before is
  /// unspecified: a large one may be a pooled block, core/float_pool.hpp).
  explicit buffer(std::size_t size);

  /// A large block goes back to the pool.
  ~buffer();

  /// A copy of `size` bytes at `data`.
  buffer(const void* data, std::size_t size);

  buffer(const buffer&) = default;
  buffer& operator=(const buffer&) = default;

  /// Moved from, a buffer is left empty (a view never pointing at bytes it
  /// no longer keeps).
  buffer(buffer&& other) noexcept;
  buffer& operator=(buffer&& other) noexcept;

  /// A view of `size` bytes at `data`, valid while `keep` (and every copy
  /// of this buffer) lives.
  static buffer view(const char* data, std::size_t size,
                     std::shared_ptr<const void> keep);

  /// Where the bytes lie; a view's are read-only (mapped so: a write
  /// faults).
  char* data() noexcept {
    return view_ != nullptr ? const_cast<char*>(view_)
                            : reinterpret_cast<char*>(words_.data());
  }

  const char* data() const noexcept {
    return view_ != nullptr ? view_
                            : reinterpret_cast<const char*>(words_.data());
  }

  std::size_t size() const noexcept {
    return size_;
  }

  /// True if this is a view (see above).
  bool is_view() const noexcept {
    return view_ != nullptr;
  }

  /// Copies a view's bytes into storage of its own (nothing for no view).
  void own();

  /// A view's bytes as floats read where they lie (sharing what keeps
  /// them); empty unless this is a view of whole floats at a float's
  /// alignment.
  shared_floats floats_in_place() const;

  /// The first `count` floats of a view, read where they lie; empty unless
  /// this is a view at a float's alignment holding at least that many.
  shared_floats floats_in_place(std::size_t count) const;

  /// The bytes as floats, taken over without a copy (a view's copied, in
  /// one pass, and let go of); false (and nothing taken) if the size is no
  /// multiple of a float's.
  bool take_floats(std::vector<float>& out);

  /// A copy of the bytes.
  std::vector<char> bytes() const;

  /// What keeps this message counted against its plane's
  /// `plane_options::max_held_bytes` (null if nothing does): the bytes are
  /// counted until the last copy of it is let go of, by default with the
  /// buffer. Taken out, it may outlive the buffer (until the values it
  /// held are used up).
  std::shared_ptr<void> take_hold() noexcept {
    return std::move(hold_);
  }

  void set_hold(std::shared_ptr<void> x) noexcept {
    hold_ = std::move(x);
  }

private:
  std::vector<float> words_;
  std::size_t size_ = 0;
  std::shared_ptr<void> hold_;
  // A view: its bytes and what keeps them (words_ is empty then).
  const char* view_ = nullptr;
  std::shared_ptr<const void> keep_;
};

/// What a plane tells its owner, on its progress thread (or a thread that
/// drives it, plane::drive): keep it short.
struct plane_handlers {
  /// A message from an admitted peer: its header and payload bytes.
  std::function<void(peer_id from, std::vector<char> header, buffer body)>
    on_message;
  /// A peer admitted itself (its hello checked out); `address` is the one
  /// it published, the same bytes `connect` takes; `identity` the one its
  /// hello proved (plane_options::identity: 0 for none, r + 1 for worker r).
  std::function<void(peer_id, const std::vector<char>& address,
                     uint32_t identity)>
    on_peer_up;
  /// A peer's connection failed or closed: sends to it fail from now on.
  std::function<void(peer_id, const std::string& why)> on_peer_down;
  /// Between passes of progress and before the thread sleeps, outside the
  /// plane's lock: what the other handlers put off (they run under it).
  /// May run on the progress thread and a driver's at once.
  std::function<void()> on_idle;
};

/// The data secret of a job whose token is `token` and whose coordinator
/// drew `salt` (job_info::data_salt): HMAC-SHA256 of a fixed label under
/// both. Only nodes that hold the token, or that were admitted over TLS,
/// can compute it; an eavesdropper on a plain connection sees the salt but
/// not the token. Empty only when both are.
std::string data_secret(const std::string& token, const std::string& salt);

/// The identity servers' planes prove to one another (never a worker's:
/// worker r is r + 1, and jobs have far fewer workers). Its secret derives
/// from the key only servers and the coordinator hold (job_info::rank_key),
/// so a worker, which holds the data secret, cannot pass for a server.
constexpr uint32_t server_identity = 0xFFFFFFFFu;

/// Settings of a plane.
struct plane_options {
  /// The job's data secret: peers prove they hold it.
  std::string secret;
  /// Who this plane is: 0 for no one in particular (a server), r + 1 for
  /// worker r. A plane with an identity proves `identity_secret` as well
  /// in its hellos (the MAC's key joins both secrets).
  uint32_t identity = 0;
  std::string identity_secret;
  /// A server's plane: `server_identity`'s secret. Set, the plane claims
  /// `server_identity` when it connects to a server (`connect(address,
  /// server_identity)`) and in its answering hello to a peer that proved
  /// it; otherwise it claims `identity`.
  std::string server_secret;
  /// The identity secret a peer that claims `identity` (> 0) must prove;
  /// empty (or no function): such peers are refused.
  std::function<std::string(uint32_t identity)> secret_of;
  /// Peers on this host (same host name and boot) may use shared memory
  /// (actorps's planes: only with ACTORPS_UCX_SHARED_MEMORY=1, since UCX
  /// 1.13 aborts a process whose peer dies in the middle of a cross-memory
  /// copy). UCX 1.13 detects no peer failure over shared memory, so such
  /// peers are
  /// connected without UCX's failure detection: the owner learns of their
  /// death elsewhere (CAF's supervision) and calls `drop`. False: every
  /// peer over a transport that detects failures (TCP on one host), which
  /// reports a dead peer by itself.
  ///
  /// Unless UCX_TLS says otherwise, shared memory means cross-memory attach
  /// (`cma`: the receiver copies a large message straight out of the
  /// sender's memory) with small messages over TCP, never UCX's
  /// shared-memory FIFOs (`mm`: posix, sysv). A process's FIFO is shared by
  /// every peer that sends to it, and a peer killed or stopped while it
  /// writes a slot blocks the slot, and with it every peer's messages, for
  /// good: one dead worker would stall the server for all.
  bool shared_memory = true;
  /// Bytes of the shared-memory segment this plane writes its large
  /// messages to a peer on this host into (one segment per such peer, its
  /// pages taken as they are first written); 0: none, every message goes
  /// through UCX. Only beside connections UCX watches (`shared_memory`
  /// false). A message that does not fit in the segment's free room at the
  /// time goes through UCX as before; a peer that cannot open the segment
  /// (another user, another PID namespace) gets every message through UCX.
  /// See runtime/ucx/segment.hpp.
  std::size_t shared_segment = 0;
  /// Bodies of at least this many bytes go through the segment (those UCX
  /// would send by rendezvous: like them, they may be held back by
  /// `max_held_bytes`, and smaller messages sent after them may arrive
  /// first).
  std::size_t shared_min = std::size_t{128} << 10;
  /// Every peer is on this host (the job's coordinator listens on a
  /// loopback address, job_info::loopback): UCX then listens on the
  /// loopback interface only
  /// (UCX_NET_DEVICES=lo, unless that variable is set), so no other host
  /// can open a connection to the plane at all.
  bool loopback_only = false;
  /// Largest header and body a peer may send (messages beyond are dropped
  /// and the peer cut off).
  std::size_t max_header = std::size_t{64} << 10;
  std::size_t max_body = std::size_t{1} << 30;
  /// Most bytes of large messages (those UCX hands over by rendezvous) this
  /// plane holds received and not yet let go of (`buffer::take_hold`),
  /// over all peers together; 0: no bound. Beyond it, further large
  /// messages wait (in the order `priority_of` gives) in their senders'
  /// memory until held ones are let go of; a message larger than the bound
  /// is received when
  /// nothing else is held. Small messages are never held back.
  std::size_t max_held_bytes = 0;
  /// The priority of a large message, from its header: held-back messages
  /// are received highest priority first, in arrival order among equals
  /// (none: all in arrival order).
  std::function<int32_t(const std::vector<char>& header)> priority_of;
};

/// From now on, closing a plane leaves UCX's worker and context to the
/// process's exit (see leave_ucx_to_exit in runtime/network.hpp).
void keep_ucx_at_close(bool keep);

/// A body made ready ahead of its send (plane::stage): copied into the
/// shared-memory segment for its peer where it would go that way, so that
/// its buffers may be let go of at once and the send later is quick; kept
/// as it is otherwise. Sent by plane::send_staged; one destroyed unsent
/// gives its place in the segment back.
class staged_body {
public:
  staged_body() = default;
  staged_body(staged_body&& other) noexcept;
  staged_body& operator=(staged_body&& other) noexcept;
  ~staged_body();

  staged_body(const staged_body&) = delete;
  staged_body& operator=(const staged_body&) = delete;

  /// Whether the body lies in a segment (else it is held as it was).
  bool in_segment() const noexcept {
    return seg_ != nullptr;
  }

private:
  friend class plane;
  payload body_;
  std::shared_ptr<out_segment> seg_;
  segment_slot slot_;
};

/// Room for a body in the shared-memory segment to a peer (plane::lease),
/// for its owner to write in place.
struct body_lease {
  /// Where the bytes go (null: no room was lent).
  char* data = nullptr;
  /// Keeps the room the lessee's: its bytes stay as written, to be read
  /// back, while `keep` (or a copy) lives.
  std::shared_ptr<const void> keep;
};

/// One process's UCX endpoint. Thread-safe: every member may be called from
/// any thread; the handlers run on the plane's progress thread (or on a
/// thread that drives it), all but on_idle under the plane's lock.
class plane {
public:
  /// Creates the UCX context and worker and starts the progress thread;
  /// `error` gets UCX's reason on failure (no usable transport, ...).
  static std::unique_ptr<plane>
  start(plane_options opts, plane_handlers handlers, std::string& error);

  ~plane();

  plane(const plane&) = delete;
  plane& operator=(const plane&) = delete;

  /// This plane's address, for peers to `connect` to: UCX's worker address
  /// behind the identity of this host.
  const std::vector<char>& address() const;

  /// This plane's identity (plane_options::identity).
  uint32_t identity() const;

  /// Large messages announced and not received yet: held back by
  /// `plane_options::max_held_bytes`, or about to be received.
  std::size_t waiting() const;

  /// Messages this plane sent through shared-memory segments
  /// (plane_options::shared_segment).
  std::size_t shared_sends() const;

  /// Drives (see `drive`) that ended with what their thread waited for.
  std::size_t caller_receives() const;

  /// Counts a request whose actor this plane's thread ran itself (a
  /// server's ingress, see spawn_ingress), and the count so far.
  void note_thread_run();
  std::size_t thread_runs() const;

  /// Connects to the plane at `address` and says hello; messages may be
  /// sent at once (they follow the hello). The same address twice gives
  /// the same peer. `peer_identity`: what the peer proves in its answering
  /// hello (0: a server to a worker; `server_identity`: a server to a
  /// server, with plane_options::server_secret set).
  peer_id connect(const std::vector<char>& address, uint32_t peer_identity = 0);

  /// The peer of the plane at `address` whose hellos proved `identity`, as
  /// `connect` or a hello named it; 0 if there is none yet (nothing is
  /// opened).
  peer_id find(const std::vector<char>& address, uint32_t identity) const;

  /// Sends `header` and `body` to `to`; `done` (optional) runs on the
  /// progress thread with "" once the bytes left, or with the reason the
  /// send failed (peer down, unknown peer, plane closed).
  void send(peer_id to, std::vector<char> header, payload body,
            std::function<void(const std::string&)> done = {});

  /// As `send`, but a body that goes through a segment is copied there by
  /// the progress thread: the caller goes on at once (a primary applies a
  /// push while the copy for its backup is made); one that does not is sent
  /// as `send` sends it. Messages sent after it to the same peer, by any
  /// call, may arrive first.
  void send_offloaded(peer_id to, std::vector<char> header, payload body,
                      std::function<void(const std::string&)> done = {});

  /// Makes `body` ready to be sent to `to` later (see staged_body): the
  /// copy into a segment happens here, on the caller's thread.
  staged_body stage(peer_id to, payload body);

  /// Room for a body of up to `size` bytes in the segment to `to`, to be
  /// written in place: a body to `to` whose first piece begins there (and
  /// that fits) is staged without copying that piece, the first time. Null
  /// data when bodies of this size do not go through a segment to `to`, or
  /// it has no room now (at most a quarter of it is lent at once). The room
  /// goes back once `keep` is gone and the peer read what was sent from
  /// it.
  body_lease lease(peer_id to, std::size_t size);

  /// Bodies staged from lent room without a copy (see `lease`).
  std::size_t in_place_sends() const;

  /// Sends `header` and a staged body to `to`, as `send` does.
  void send_staged(peer_id to, std::vector<char> header, staged_body body,
                   std::function<void(const std::string&)> done = {});

  /// Progresses the plane on the calling thread until `done()` holds (true)
  /// or `until` passes (false): for a thread about to wait for something
  /// the plane delivers, which then wakes it directly instead of waking the
  /// progress thread, which would wake it in turn. The handlers run on this
  /// thread meanwhile (on_idle may run on both at once); `done` is asked
  /// after each pass, whenever the progress thread ran on_idle or someone
  /// called `wake_driver`, and every 2 ms. One
  /// thread drives at a time: another returns false at once. False too once
  /// the plane is closing.
  bool drive(const std::function<bool()>& done,
             std::chrono::steady_clock::time_point until);

  /// Wakes the thread in `drive`, if one sleeps there, to ask its `done`
  /// again (for what reaches it other than through this plane).
  void wake_driver();

  /// Gives up on peer `to` (its node died, as the owner learned elsewhere):
  /// sends to it, in flight or later, fail, and what it still
  /// sends is dropped. `on_peer_down` runs unless it ran already.
  void drop(peer_id to, const std::string& why);

  /// Stops the progress thread and closes every connection; sends not yet
  /// done fail. Called by the destructor.
  void close();

  struct impl;

private:
  friend struct plane_testing;

  explicit plane(std::unique_ptr<impl> ptr);

  std::unique_ptr<impl> impl_;
};

} // namespace actorps::ucx
