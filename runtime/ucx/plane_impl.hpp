// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Internal to runtime/ucx: the state of a plane and its members, shared by
// plane.cpp (progress thread, sends, peers, the public API) and receive.cpp
// (hellos, data, rendezvous fetches).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

#include "runtime/ucx/plane.hpp"
#include "runtime/ucx/segment.hpp"

namespace actorps::ucx {

// Active message ids.
constexpr unsigned hello_am = 1;
constexpr unsigned data_am = 2;
// A peer's shared-memory segment (header: segment_info), its answer (header:
// one byte, 1 if it mapped the segment), and a message whose body lies in
// the segment (header: segment_slot, then the message's own header).
constexpr unsigned segment_am = 3;
constexpr unsigned segment_ack_am = 4;
constexpr unsigned shared_am = 5;

// Messages in a peer's segment are read where they lie while those kept
// that way take at most 1 / view_share of it; beyond, they are copied out
// (so views kept long, such as the pieces of a large pull waiting for the
// rest, never make the peer touch its whole segment).
constexpr uint64_t view_share = 4;

inline std::string reason(ucs_status_t status) {
  return ucs_status_string(status);
}

struct plane::impl {
  struct send_state;
  struct fetch_state;

  // Bytes of large messages received and not yet let go of
  // (plane_options::max_held_bytes). Shared with the holds, which may
  // outlive the plane.
  struct held_bytes {
    std::atomic<std::size_t> bytes{0};
    std::mutex mtx;
    impl* owner = nullptr;

    // A hold of `n` bytes: let go of, it wakes the plane's thread.
    static std::shared_ptr<void> make(std::shared_ptr<held_bytes> self,
                                      std::size_t n);
  };

  struct peer {
    std::vector<char> address;
    ucp_ep_h out = nullptr;
    // Without UCX's failure detection (shared memory): such an endpoint is
    // never closed by force before the plane closes (UCX leaves that
    // undefined), and what is in flight on it is failed by us.
    bool unwatched = false;
    bool admitted = false;
    bool down = false;
    std::set<send_state*> sending;
    std::set<fetch_state*> fetching;
    // The segment our large messages to it go through (a sender copying
    // into it outside the lock keeps it alive), usable once the peer said
    // it mapped it; and the peer's segment, mapped here.
    std::shared_ptr<out_segment> out_seg;
    bool out_seg_ready = false;
    // (Shared with the messages read where they lie in it.)
    std::shared_ptr<in_segment> in_seg;
    // The peer offered a segment (and got our one answer).
    bool seg_answered = false;
  };

  // A send in flight: owns what UCX reads until completion.
  struct send_state {
    impl* self = nullptr;
    peer_id to = 0;
    std::vector<char> header;
    payload body;
    // A body of several pieces, copied into one run.
    std::vector<char> gathered;
    std::function<void(const std::string&)> done;
    // Failed by `mark_down` while UCX still holds it: UCX's completion only
    // frees it.
    bool abandoned = false;
    // A message in a segment: its slot is given back if the send fails.
    std::shared_ptr<out_segment> seg;
    segment_slot slot;
    // Inside the UCX call that starts it, and completed there (UCX may run
    // the callback before it returns: a purge on a failed endpoint), with
    // what status.
    bool in_call = false;
    bool done_in_call = false;
    ucs_status_t call_status = UCS_OK;
  };

  // A rendezvous message of `length` bytes, received into `body` (made
  // when its receiving starts).
  struct fetch_state {
    impl* self;
    peer_id from;
    void* desc;
    std::vector<char> header;
    std::size_t length = 0;
    // Who goes first while messages wait (plane_options::priority_of).
    int32_t priority = 0;
    buffer body;
    bool abandoned = false;
    // In the peer's segment (no UCX descriptor then).
    bool shared = false;
    segment_slot slot;
    // As send_state's.
    bool in_call = false;
    bool done_in_call = false;
    ucs_status_t call_status = UCS_OK;
  };

  plane_options opts;
  plane_handlers handlers;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::string host;
  std::vector<char> address;
  int wake_fd = -1;
  int epoll_fd = -1;
  std::thread thread;
  // Set (under ucx_mtx) before the progress thread arms the worker and
  // sleeps; whoever leaves work for it then wakes it.
  std::atomic<bool> sleeping{false};

  // A thread about to wait for what the plane delivers may progress it
  // itself (plane::drive), one such thread at a time (`driver_mtx`): it
  // sleeps in `driver_epoll` (UCX's `worker_fd` and `driver_wake_fd`), and
  // while it drives the progress thread's set (`epoll_fd`) leaves
  // `worker_fd` out, so that UCX's events wake the driver alone.
  int worker_fd = -1;
  int driver_epoll = -1;
  int driver_wake_fd = -1;
  std::mutex driver_mtx;
  // Set before a driver sleeps; the progress thread, having delivered
  // something (on_idle), wakes it: what it waits for may be among it.
  std::atomic<bool> driver_sleeping{false};
  // A driver could not give `worker_fd` back to `epoll_fd`: the progress
  // thread tries again and, until it can, polls.
  std::atomic<bool> fd_lost{false};
  // Drives that ended with what their thread waited for.
  std::atomic<std::size_t> caller_receives{0};
  // Requests whose actor the progress thread ran (note_thread_run).
  std::atomic<std::size_t> thread_runs{0};
  // A driver sleeps at most this long before it asks `done` again.
  static constexpr std::chrono::milliseconds driver_slice{2};

  // Addresses and peer ids.
  std::mutex mtx;
  peer_id next_peer = 1;
  // Peers by address and the identity their hellos proved: a hello that
  // names another plane's address with its own identity is another peer,
  // never the plane whose address it named.
  std::map<std::pair<std::vector<char>, uint32_t>, peer_id> by_address;

  // Every UCX call, and everything below, happens under `ucx_mtx`: callers
  // send on their own thread (a small message leaves at once, without
  // waking the progress thread), the progress thread receives and finishes
  // what is pending. Recursive: a handler may send.
  std::recursive_mutex ucx_mtx;
  bool stopping = false;
  bool closed = false;
  std::map<peer_id, peer> peers;
  std::unordered_map<ucp_ep_h, peer_id> by_out_ep;
  std::unordered_map<ucp_ep_h, peer_id> by_reply_ep;
  std::set<std::vector<unsigned char>> used_nonces;
  // Rendezvous messages to receive, highest priority first, in arrival
  // order among equals; the first ones wait while `may_fetch` says no.
  std::vector<fetch_state*> fetches;
  std::shared_ptr<held_bytes> held = std::make_shared<held_bytes>();
  std::atomic<std::size_t> shared_sends{0};
  std::atomic<std::size_t> in_place_sends{0};
  // Segment messages from peers not admitted, dropped unread (tests wait
  // on the count).
  std::mutex unheard_mtx;
  std::condition_variable unheard_cv;
  std::size_t unheard = 0;
  // The files of the peers' segments mapped here: each serves one peer.
  std::set<std::pair<uint64_t, uint64_t>> mapped_segments;
  // Endpoints of dropped unwatched peers, closed with the plane.
  std::vector<ucp_ep_h> dropped_eps;
  // Sends and receives UCX still holds after their peer was dropped.
  std::set<send_state*> abandoned_sends;
  std::set<fetch_state*> abandoned_fetches;

  ~impl();

  // Wakes the progress thread if it sleeps (or is about to).
  void wake();

  // Wakes a driver if it sleeps (or is about to).
  void wake_driver();

  // Puts `worker_fd` (back) into the progress thread's set: false if it
  // cannot.
  bool watch_worker_fd();

  // Runs the owner's on_idle, then wakes a sleeping driver (on the progress
  // thread).
  void idle();

  peer_id id_of(const std::vector<char>& addr, uint32_t identity);

  // -- progress thread (progress.cpp) ---------------------------------------

  void run();

  // Progresses the worker until idle, then the fetches (under ucx_mtx).
  void progress_all();

  // Arms the worker unless the plane stops or closed: true if UCX says it
  // has events to progress first (takes ucx_mtx).
  bool arm_busy();

  // Closes `ep` without the peer's word: what is in flight on it completes
  // with UCS_ERR_CANCELED. With `wait`, progresses until the close is done.
  void force_close(ucp_ep_h ep, bool wait);

  void shut_down();

  void abandon(send_state* x, const std::string& why);

  void abandon(fetch_state* f);

  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);

  void mark_down(peer_id id, const std::string& why);

  // Opens the endpoint to peer `id` and says hello first, claiming what
  // this plane claims toward a peer that proved `peer_identity`.
  void open(peer_id id, const std::vector<char>& addr, uint32_t peer_identity);

  // What this plane claims toward a peer that proved `peer_identity`, and
  // the secret that proves it.
  uint32_t claim_for(uint32_t peer_identity) const;

  static void on_sent(void* request, ucs_status_t status, void* user_data);

  // True if UCX holds the send pending.
  bool submit(ucp_ep_h ep, unsigned am, send_state* state);

  // A send of ours completed (or failed) with `status`.
  void finish(send_state* state, ucs_status_t status);

  // Sends `state` to `to`: true if UCX holds it pending (the progress
  // thread must go on with it).
  bool send_now(peer_id to, send_state* state);

  static ucs_status_t on_hello(void* arg, const void* header,
                               size_t header_length, void* data, size_t length,
                               const ucp_am_recv_param_t* param);

  static ucs_status_t on_data(void* arg, const void* header,
                              size_t header_length, void* data, size_t length,
                              const ucp_am_recv_param_t* param);

  static void on_fetched(void* request, ucs_status_t status, size_t,
                         void* user_data);

  void fetched(fetch_state* f, ucs_status_t status);

  void run_fetches();

  // Offers this plane's segment to peer `id` on this host (after the hello
  // on `ep`).
  void offer_segment(peer_id id, ucp_ep_h ep);

  // The segment to peer `to`, if it has one its reader mapped and neither
  // the peer nor this plane is going (null otherwise).
  const std::shared_ptr<out_segment>* ready_segment(peer_id to);

  // A slot of `size` bytes in the segment to peer `to`, if there is one
  // with room (`seg` then keeps the segment).
  std::optional<segment_slot> reserve_shared(peer_id to, std::size_t size,
                                             std::shared_ptr<out_segment>& seg);

  // The slot lent (plane::lease) in the segment to peer `to` that `body`'s
  // first piece begins, if it holds the whole body and never went (`seg`
  // then keeps the segment).
  std::optional<segment_slot> take_lent(peer_id to, const payload& body,
                                        std::shared_ptr<out_segment>& seg);

  // Sends `state` (its header already led by `slot`) as a message in the
  // segment `seg`: true if UCX holds it pending.
  bool send_shared(peer_id to, send_state* state,
                   const std::shared_ptr<out_segment>& seg,
                   const segment_slot& slot);

  // The admitted, live peer `param`'s reply endpoint belongs to (0: none).
  peer_id admitted_sender(const ucp_am_recv_param_t* param);

  static ucs_status_t
  on_segment(void* arg, const void* header, size_t header_length, void* data,
             size_t length, const ucp_am_recv_param_t* param);

  static ucs_status_t
  on_segment_ack(void* arg, const void* header, size_t header_length,
                 void* data, size_t length, const ucp_am_recv_param_t* param);

  static ucs_status_t on_shared(void* arg, const void* header,
                                size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param);

  // Sends whose bodies the progress thread copies into their slots
  // (plane::send_offloaded): each send_state holds its segment and slot.
  std::vector<send_state*> copies;

  // Copies the queued bodies into their slots and sends them (on the
  // progress thread, the copies outside the lock).
  void run_copies();

  // True if the progress thread has work without UCX's events: a message
  // that may be received now or a body to copy (under the lock).
  bool work_ready() const {
    return fetch_ready() || !copies.empty();
  }

  // Queues `f` after every waiting message of at least its priority.
  void enqueue(fetch_state* f);

  // True if a message of `size` bytes may be received now.
  bool may_fetch(std::size_t size) const;

  // True if the first waiting message may be received now.
  bool fetch_ready() const;
};

} // namespace actorps::ucx
