/*
 * probe.c (built as ucxt by bench/ucx-probe/build.sh) - UCX 1.13 experiment: NONE vs PEER error mode endpoints between two
 * processes on one host, throughput and peer-kill survival.
 *
 * Usage:
 *   ucxt <role> <dir> <me> <peer> <errmode> <size> <count> <gen> [fresh_peer]
 *     role    : send | recv
 *     dir     : directory for address files (<dir>/<name>.addr)
 *     me/peer : names used for address files
 *     errmode : none | peer
 *     size    : message size in bytes
 *     count   : number of messages (>0: throughput/verify run; 0: stream
 *               forever until SIGUSR1 = "control plane says peer died")
 *     gen     : generation number (goes into the tag)
 *     fresh_peer : (count==0 only) name of the fresh peer to reconnect to
 *                  after the death of <peer>; the fresh peer uses gen+1.
 * Env: UCXT_PRINT_EP=1 prints ucp_ep_print_info after the first transfer.
 *      UCXT_VERIFY=1 full payload verification at the receiver.
 *      UCXT_WINDOW=n outstanding sends / preposted receives (default 8).
 * Each process has an endpoint to the other (bidirectional), like a PS.
 */
#define _GNU_SOURCE
#include <ucp/api/ucp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <signal.h>
#include <time.h>
#include <errno.h>
#include <sys/stat.h>

#define MAXW 64
#define TAG_MASK ((ucp_tag_t)-1)

static volatile sig_atomic_t peer_dead = 0;
static const char *volatile phase = "init";
static const char *role_s = "?";

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void on_usr1(int s) { (void)s; peer_dead = 1; }
static void on_alarm(int s)
{
    char buf[256];
    int n = snprintf(buf, sizeof(buf), "[%s] WATCHDOG: HANG in phase '%s'\n",
                     role_s, phase);
    (void)s;
    if (write(2, buf, n) < 0) {}
    _exit(42);
}

#define LOG(...) do { printf("[%s %.1f] ", role_s, now_ms()); \
                      printf(__VA_ARGS__); printf("\n"); fflush(stdout); } while (0)

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;
static ucs_status_t ep_err_status = UCS_OK;
static int ep_err_called = 0;
static size_t g_size;
static int g_window = 8;

typedef struct {
    int busy;
    int done;
    ucs_status_t status;
    void *req;
    double t_post;
    uint64_t seq;
    size_t length;
    char *buf;
} slot_t;

static slot_t slots[MAXW];

static void ep_err_cb(void *arg, ucp_ep_h e, ucs_status_t status)
{
    (void)arg; (void)e;
    ep_err_called++;
    ep_err_status = status;
    LOG("EP ERROR HANDLER called: %s", ucs_status_string(status));
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    slot_t *s = user_data;
    (void)request;
    s->done = 1;
    s->status = status;
}

static void recv_cb(void *request, ucs_status_t status,
                    const ucp_tag_recv_info_t *info, void *user_data)
{
    slot_t *s = user_data;
    (void)request;
    s->done = 1;
    s->status = status;
    s->length = info ? info->length : 0;
}

static void close_cb(void *request, ucs_status_t status, void *user_data)
{
    (void)request;
    *(ucs_status_t *)user_data = status;
}

static void fill_pattern(char *buf, size_t size)
{
    size_t i;
    for (i = 8; i < size; i++) buf[i] = (char)((i * 131) ^ 0x5a);
}

static int check_pattern(const char *buf, size_t size)
{
    size_t i;
    for (i = 8; i < size; i++)
        if (buf[i] != (char)((i * 131) ^ 0x5a)) return 0;
    return 1;
}

static void write_addr(const char *dir, const char *me)
{
    ucp_address_t *addr;
    size_t len;
    char path[512], tmp[512];
    FILE *f;
    if (ucp_worker_get_address(worker, &addr, &len) != UCS_OK) abort();
    snprintf(path, sizeof(path), "%s/%s.addr", dir, me);
    snprintf(tmp, sizeof(tmp), "%s/%s.addr.tmp", dir, me);
    f = fopen(tmp, "wb");
    fwrite(addr, 1, len, f);
    fclose(f);
    rename(tmp, path);
    ucp_worker_release_address(worker, addr);
}

static void *read_addr(const char *dir, const char *peer, size_t *len)
{
    char path[512];
    struct stat st;
    void *buf;
    FILE *f;
    double t0 = now_ms();
    snprintf(path, sizeof(path), "%s/%s.addr", dir, peer);
    while (stat(path, &st) != 0) {
        ucp_worker_progress(worker);
        usleep(1000);
        if (now_ms() - t0 > 20000) { LOG("no peer address %s", path); exit(5); }
    }
    buf = malloc(st.st_size);
    f = fopen(path, "rb");
    if (fread(buf, 1, st.st_size, f) != (size_t)st.st_size) abort();
    fclose(f);
    *len = st.st_size;
    return buf;
}

static ucp_ep_h make_ep(const char *dir, const char *peer, int peer_mode)
{
    size_t len;
    void *addr = read_addr(dir, peer, &len);
    ucp_ep_params_t p;
    ucp_ep_h e;
    ucs_status_t st;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.address = addr;
    p.err_mode = peer_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    if (peer_mode) {
        p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        p.err_handler.cb = ep_err_cb;
        p.err_handler.arg = NULL;
    }
    st = ucp_ep_create(worker, &p, &e);
    free(addr);
    if (st != UCS_OK) { LOG("ep_create failed %s", ucs_status_string(st)); exit(6); }
    ep_err_called = 0;
    return e;
}

static void post_send(slot_t *s, uint64_t seq, ucp_tag_t tag)
{
    ucp_request_param_t p;
    void *r;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = send_cb;
    p.user_data = s;
    memcpy(s->buf, &seq, 8);
    s->seq = seq;
    s->busy = 1;
    s->done = 0;
    s->t_post = now_ms();
    r = ucp_tag_send_nbx(ep, s->buf, g_size, tag, &p);
    if (r == NULL) { s->done = 1; s->status = UCS_OK; s->req = NULL; }
    else if (UCS_PTR_IS_ERR(r)) { s->done = 1; s->status = UCS_PTR_STATUS(r); s->req = NULL; }
    else s->req = r;
}

static void post_recv(slot_t *s, ucp_tag_t tag)
{
    ucp_request_param_t p;
    ucp_tag_recv_info_t info;
    void *r;
    memset(&p, 0, sizeof(p));
    memset(&info, 0, sizeof(info));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = recv_cb;
    p.user_data = s;
    p.recv_info.tag_info = &info;
    s->busy = 1;
    s->done = 0;
    s->t_post = now_ms();
    r = ucp_tag_recv_nbx(worker, s->buf, g_size, tag, TAG_MASK, &p);
    if (r == NULL) { /* completed immediately, callback not invoked */
        s->done = 1; s->status = UCS_OK; s->length = info.length; s->req = NULL;
    } else if (UCS_PTR_IS_ERR(r)) { s->done = 1; s->status = UCS_PTR_STATUS(r); s->req = NULL; }
    else s->req = r;
}

static void release_slot(slot_t *s)
{
    if (s->req) ucp_request_free(s->req);
    s->req = NULL;
    s->busy = 0;
}

/* small control message (ack) */
static void send_small(ucp_tag_t tag)
{
    static uint64_t v = 0xacc;
    ucp_request_param_t p;
    void *r;
    double t0 = now_ms();
    memset(&p, 0, sizeof(p));
    r = ucp_tag_send_nbx(ep, &v, 8, tag, &p);
    if (UCS_PTR_IS_ERR(r)) { LOG("ack send failed"); return; }
    if (r) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS &&
               now_ms() - t0 < 5000)
            ucp_worker_progress(worker);
        ucp_request_free(r);
    }
}

static void wait_small(ucp_tag_t tag)
{
    uint64_t v;
    ucp_request_param_t p;
    void *r;
    memset(&p, 0, sizeof(p));
    r = ucp_tag_recv_nbx(worker, &v, 8, tag, TAG_MASK, &p);
    if (r == NULL) return;
    if (UCS_PTR_IS_ERR(r)) { LOG("ack recv failed"); return; }
    while (ucp_request_check_status(r) == UCS_INPROGRESS)
        ucp_worker_progress(worker);
    ucp_request_free(r);
}

static void flush_close_ep(void)
{
    ucp_request_param_t p;
    void *r;
    double t0 = now_ms();
    memset(&p, 0, sizeof(p));
    r = ucp_ep_close_nbx(ep, &p);
    if (r && !UCS_PTR_IS_ERR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS &&
               now_ms() - t0 < 3000)
            ucp_worker_progress(worker);
        if (ucp_request_check_status(r) == UCS_INPROGRESS)
            LOG("flush close did not complete in 3s");
        else ucp_request_free(r);
    }
    ep = NULL;
}

/* returns number of messages sent ok */
static int run_sender(int count, int gen, int print_ep)
{
    ucp_tag_t tag = ((ucp_tag_t)gen << 8) | 1;
    uint64_t next = 0;
    int completed = 0, i, errors = 0, printed = 0;
    int W = g_window;
    double t0 = now_ms();

    for (i = 0; i < W; i++) {
        if (count && next >= (uint64_t)count) break;
        post_send(&slots[i], next++, tag);
    }
    while (1) {
        if (peer_dead) return -1;
        ucp_worker_progress(worker);
        for (i = 0; i < W; i++) {
            slot_t *s = &slots[i];
            if (!s->busy || !s->done) continue;
            if (s->status != UCS_OK) {
                errors++;
                if (errors < 5) LOG("send %lu completed with %s", (unsigned long)s->seq,
                                    ucs_status_string(s->status));
            }
            release_slot(s);
            completed++;
            if (print_ep && !printed) { printed = 1; ucp_ep_print_info(ep, stdout); fflush(stdout); }
            if (!count || next < (uint64_t)count) post_send(s, next++, tag);
        }
        if (count && completed == count) break;
    }
    phase = "sender wait ack";
    wait_small(((ucp_tag_t)gen << 8) | 2);
    LOG("sender done: %d msgs of %zu in %.1f ms, errors=%d", count, g_size,
        now_ms() - t0, errors);
    return completed - errors;
}

static int run_receiver(int count, int gen, int verify, int print_ep)
{
    ucp_tag_t tag = ((ucp_tag_t)gen << 8) | 1;
    int posted = 0, completed = 0, i, bad = 0, errors = 0;
    int W = g_window;
    double t_first = 0, t_last = 0;

    for (i = 0; i < W; i++) {
        if (count && posted >= count) break;
        post_recv(&slots[i], tag); posted++;
    }
    while (1) {
        if (peer_dead) return -1;
        ucp_worker_progress(worker);
        for (i = 0; i < W; i++) {
            slot_t *s = &slots[i];
            uint64_t seq;
            if (!s->busy || !s->done) continue;
            if (s->status != UCS_OK) errors++;
            else {
                memcpy(&seq, s->buf, 8);
                if (getenv("UCXT_DEBUG") && s->length != g_size) LOG("dbg len=%zu seq=%lu last=%d", s->length, (unsigned long)seq, s->buf[g_size-1]);
                if (s->length != g_size) bad++;
                else if (count && seq >= (uint64_t)count) bad++;
                else if (verify && !check_pattern(s->buf, g_size)) bad++;
                else if (!verify && s->buf[g_size - 1] != (char)(((g_size - 1) * 131) ^ 0x5a)) bad++;
            }
            release_slot(s);
            completed++;
            if (completed == 1) t_first = now_ms();
            t_last = now_ms();
            if (!count || posted < count) { post_recv(s, tag); posted++; }
        }
        if (count && completed == count) break;
    }
    if (print_ep) { ucp_ep_print_info(ep, stdout); fflush(stdout); }
    {
        double mbps = (count > 1) ? (double)(count - 1) * g_size / ((t_last - t_first) * 1e3) : 0;
        LOG("RESULT size=%zu count=%d MBps=%.1f bad=%d errors=%d verify=%d",
            g_size, count, mbps, bad, errors, verify);
    }
    phase = "receiver send ack";
    send_small(((ucp_tag_t)gen << 8) | 2);
    return (bad || errors) ? 0 : completed;
}

static const char *st_s(ucs_status_t s) { return ucs_status_string(s); }

/* Statuses of the busy slots into hist ("PENDING" for those not done),
 * with the counts of done and pending ones. */
static void census(char *hist, size_t cap, int *done, int *pending)
{
    int i;
    hist[0] = 0; *done = 0; *pending = 0;
    for (i = 0; i < g_window; i++) if (slots[i].busy) {
        char b[64];
        if (slots[i].done) { (*done)++; snprintf(b, sizeof(b), "%s ", st_s(slots[i].status)); }
        else { (*pending)++; snprintf(b, sizeof(b), "PENDING "); }
        strncat(hist, b, cap - strlen(hist) - 1);
    }
}

/* Closes ep with the flags of p (its callback sets *status) and progresses
 * until the close completed or limit_ms passed; returns the close request
 * (or NULL or an error pointer, as ucp_ep_close_nbx). */
static void *close_and_wait(ucp_request_param_t *p, ucs_status_t *status,
                            double limit_ms)
{
    double t0 = now_ms();
    void *r = ucp_ep_close_nbx(ep, p);
    if (r == NULL) *status = UCS_OK;
    else if (UCS_PTR_IS_ERR(r)) *status = UCS_PTR_STATUS(r);
    while (*status == UCS_INPROGRESS && now_ms() - t0 < limit_ms)
        ucp_worker_progress(worker);
    return r;
}

/* after the control plane told us the peer died */
static void survive(int is_sender, const char *dir, const char *fresh_peer,
                    int peer_mode, int gen)
{
    int i, outstanding = 0, done_in_wait = 0, nz = 0, calls = 0;
    double t0, maxcall = 0, t, tc;
    ucs_status_t close_status = UCS_INPROGRESS;
    int W = g_window;
    char hist[1024] = "";
    void *post_death_req[2] = {NULL, NULL};
    static char small_buf[4096];

    for (i = 0; i < W; i++) if (slots[i].busy && !slots[i].done) outstanding++;
    LOG("SURVIVE: notified of peer death; outstanding %s requests: %d, ep_err_called=%d",
        is_sender ? "send" : "recv", outstanding, ep_err_called);

    if (!is_sender) {
        /* receiver-survivor also tries to send to the dead peer on its ep */
        ucp_request_param_t p;
        memset(&p, 0, sizeof(p));
        post_death_req[0] = ucp_tag_send_nbx(ep, small_buf, sizeof(small_buf), 0x777, &p);
        post_death_req[1] = ucp_tag_send_nbx(ep, slots[0].buf, g_size, 0x778, &p);
        for (i = 0; i < 2; i++)
            LOG("post-death send %d to dead peer: %s", i,
                post_death_req[i] == NULL ? "completed immediately" :
                UCS_PTR_IS_ERR(post_death_req[i]) ? st_s(UCS_PTR_STATUS(post_death_req[i])) :
                "in progress");
    }

    /* phase 1: keep progressing 1 s, see if anything completes / hangs */
    phase = "progress 1s after death";
    alarm(10);
    t0 = now_ms();
    while ((t = now_ms()) - t0 < 1000) {
        unsigned r = ucp_worker_progress(worker);
        double d = now_ms() - t;
        calls++;
        if (r) nz++;
        if (d > maxcall) maxcall = d;
    }
    for (i = 0; i < W; i++)
        if (slots[i].busy && slots[i].done) {
            char b[64];
            done_in_wait++;
            snprintf(b, sizeof(b), "%s ", st_s(slots[i].status));
            strncat(hist, b, sizeof(hist) - strlen(hist) - 1);
        }
    LOG("PHASE1 1s progress: calls=%d nonzero=%d max_call=%.2f ms; requests completed: %d (%s) ep_err_called=%d",
        calls, nz, maxcall, done_in_wait, hist, ep_err_called);
    for (i = 0; i < 2; i++)
        if (post_death_req[i] && !UCS_PTR_IS_ERR(post_death_req[i]))
            LOG("post-death send %d status after 1s: %s", i,
                st_s(ucp_request_check_status(post_death_req[i])));

    if (!is_sender) {
        /* cancel outstanding receives */
        phase = "cancel recvs";
        for (i = 0; i < W; i++)
            if (slots[i].busy && !slots[i].done && slots[i].req)
                ucp_request_cancel(worker, slots[i].req);
        t0 = now_ms();
        while (now_ms() - t0 < 500) ucp_worker_progress(worker);
        census(hist, sizeof(hist), &done_in_wait, &outstanding);
        LOG("after ucp_request_cancel of recvs + 0.5s: completed=%d still_pending=%d (%s)",
            done_in_wait, outstanding, hist);
    }

    /* phase 2: force close */
    phase = "force close";
    alarm(10);
    {
        ucp_request_param_t p;
        void *r;
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
        p.flags = UCP_EP_CLOSE_FLAG_FORCE;
        p.cb.send = close_cb;
        p.user_data = &close_status;
        t0 = now_ms();
        r = close_and_wait(&p, &close_status, 2000);
        tc = now_ms() - t0;
        LOG("FORCE CLOSE: %s after %.2f ms (returned %s)",
            close_status == UCS_INPROGRESS ? "NOT COMPLETED" : st_s(close_status), tc,
            r == NULL ? "NULL" : UCS_PTR_IS_ERR(r) ? "error" : "request");
        if (r && !UCS_PTR_IS_ERR(r) && close_status != UCS_INPROGRESS) ucp_request_free(r);
        if (r && UCS_PTR_IS_ERR(r)) {
            /* force close refused (NONE mode): try a normal (flush) close */
            close_status = UCS_INPROGRESS;
            p.flags = 0;
            t0 = now_ms();
            r = close_and_wait(&p, &close_status, 2000);
            LOG("FLUSH CLOSE (fallback): %s after %.2f ms",
                close_status == UCS_INPROGRESS ? "NOT COMPLETED" : st_s(close_status),
                now_ms() - t0);
            if (r && !UCS_PTR_IS_ERR(r)) ucp_request_free(r); /* release even if pending */
        }
        ep = NULL;
        /* progress a bit more and report requests */
        t0 = now_ms();
        while (now_ms() - t0 < 200) ucp_worker_progress(worker);
        census(hist, sizeof(hist), &done_in_wait, &outstanding);
        LOG("after force close: request statuses: completed=%d still_pending=%d (%s)",
            done_in_wait, outstanding, hist);
        for (i = 0; i < 2; i++)
            if (post_death_req[i] && !UCS_PTR_IS_ERR(post_death_req[i]))
                LOG("post-death send %d status after force close: %s", i,
                    st_s(ucp_request_check_status(post_death_req[i])));
        for (i = 0; i < W; i++) {
            if (slots[i].busy && slots[i].done) release_slot(&slots[i]);
            else if (slots[i].busy) { slots[i].busy = 0; slots[i].req = NULL; /* leak */ }
        }
    }

    /* phase 3: reconnect to fresh peer */
    phase = "reconnect";
    peer_dead = 0;
    alarm(30);
    if (getenv("UCXT_RECREATE_WORKER")) {
        char nm[256];
        ucp_worker_params_t wp;
        phase = "worker destroy";
        t0 = now_ms();
        ucp_worker_destroy(worker);
        LOG("WORKER DESTROY took %.2f ms", now_ms() - t0);
        memset(&wp, 0, sizeof(wp));
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SINGLE;
        if (ucp_worker_create(ctx, &wp, &worker) != UCS_OK) { LOG("worker re-create failed"); exit(7); }
        snprintf(nm, sizeof(nm), "%sb", role_s);
        write_addr(dir, nm);
        phase = "reconnect";
    }
    for (i = 0; i < W; i++) { /* old buffers may still be referenced by leaked requests */
        slots[i].buf = malloc(g_size);
        fill_pattern(slots[i].buf, g_size);
    }
    LOG("reconnecting to fresh peer %s", fresh_peer);
    ep = make_ep(dir, fresh_peer, peer_mode);
    {
        int ok;
        if (is_sender) ok = run_sender(10, gen + 1, 0);
        else ok = run_receiver(10, gen + 1, 1, 0);
        LOG("RECONNECT %s (%d msgs ok)", ok == 10 ? "OK" : "FAILED", ok);
    }
    flush_close_ep();
}

int main(int argc, char **argv)
{
    ucp_params_t cp;
    ucp_worker_params_t wp;
    const char *role, *dir, *me, *peer, *fresh = NULL;
    int peer_mode, count, gen, is_sender, print_ep, verify, i;
    double tstart;

    if (argc < 9) { fprintf(stderr, "usage, see source\n"); return 2; }
    role = argv[1]; dir = argv[2]; me = argv[3]; peer = argv[4];
    peer_mode = !strcmp(argv[5], "peer");
    g_size = strtoul(argv[6], NULL, 0);
    count = atoi(argv[7]);
    gen = atoi(argv[8]);
    if (argc > 9) fresh = argv[9];
    is_sender = !strcmp(role, "send");
    role_s = is_sender ? "S" : "R";
    print_ep = getenv("UCXT_PRINT_EP") != NULL;
    verify = getenv("UCXT_VERIFY") != NULL;
    if (getenv("UCXT_WINDOW")) g_window = atoi(getenv("UCXT_WINDOW"));
    if (g_window > MAXW) g_window = MAXW;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGUSR1, on_usr1);
    signal(SIGALRM, on_alarm);
    tstart = now_ms();
    (void)tstart;

    memset(&cp, 0, sizeof(cp));
    cp.field_mask = UCP_PARAM_FIELD_FEATURES;
    cp.features = UCP_FEATURE_TAG;
    if (ucp_init(&cp, NULL, &ctx) != UCS_OK) return 3;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucp_worker_create(ctx, &wp, &worker) != UCS_OK) return 4;

    for (i = 0; i < g_window; i++) {
        slots[i].buf = malloc(g_size < 8 ? 8 : g_size);
        fill_pattern(slots[i].buf, g_size);
    }

    phase = "connect";
    alarm(count ? 60 : 120);
    write_addr(dir, me);
    ep = make_ep(dir, peer, peer_mode);

    phase = "transfer";
    if (is_sender) {
        if (run_sender(count, gen, print_ep) < 0)
            survive(1, dir, fresh, peer_mode, gen);
        else flush_close_ep();
    } else {
        if (run_receiver(count, gen, verify, print_ep) < 0)
            survive(0, dir, fresh, peer_mode, gen);
        else flush_close_ep();
    }
    phase = "cleanup";
    alarm(10);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    LOG("EXIT normally");
    return 0;
}
