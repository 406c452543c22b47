/*
 * ring_comm.c - the ring's communication around the transport: the exchange with the two
 * neighbours (bounded waits), the error every message carries, and the agreement rounds that
 * leave every rank with the same outcome.
 */
#define _POSIX_C_SOURCE 200809L
#include "ring_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

double ring_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double ring_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ring_run_init(ring_run *run, const fa_ring_transport *t, const fa_ring_options *opts)
{
    memset(run, 0, sizeof *run);
    run->t = t;
    run->timeout_ms = opts && opts->timeout_ms > 0 ? opts->timeout_ms : RING_DEFAULT_TIMEOUT_MS;
    run->err.status = FA_STATUS_OK;
    run->err.origin = -1;
    run->st.steps = t ? t->size : 0;
    run->started = ring_now();
}

int ring_run_start(ring_run *run, fa_context *ctx, const fa_ring_transport *t,
                   const fa_ring_options *opts, const void *tensors)
{
    ring_run_init(run, t, opts);
    if (ctx && t && t->send && t->recv && t->wait && tensors && t->size >= 1 && t->rank >= 0 &&
        t->rank < t->size)
        return 1;
    ring_fail(run, FA_STATUS_NULL_POINTER, "a context, transport or tensors is missing (no rank "
                                           "can be told)");
    return 0;
}

int ring_failed(const ring_run *run)
{
    return run->err.status != FA_STATUS_OK;
}

fa_status ring_fail(ring_run *run, fa_status status, const char *fmt, ...)
{
    if (ring_failed(run))
        return status;
    int rank = run->t ? run->t->rank : 0;
    int n = snprintf(run->whole, sizeof run->whole, "rank %d: ", rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(run->whole + n, sizeof run->whole - (size_t)n, fmt, ap);
    va_end(ap);
    run->err.status = (int32_t)status;
    run->err.origin = rank;
    /* What the other ranks get: the head of it, marked where it was cut. */
    static const char cut[] = " [... cut; the failing rank's why has it all]";
    size_t len = strlen(run->whole);
    if (len < sizeof run->err.msg) {
        memcpy(run->err.msg, run->whole, len + 1);
    } else {
        size_t keep = sizeof run->err.msg - sizeof cut;
        memcpy(run->err.msg, run->whole, keep);
        memcpy(run->err.msg + keep, cut, sizeof cut);
    }
    return status;
}

void ring_adopt(ring_run *run, const ring_header *h)
{
    if (h->status == FA_STATUS_OK || h->origin < 0)
        return;
    if (ring_failed(run) && run->err.origin <= h->origin)
        return;
    run->err = *h;
    run->err.msg[RING_MSG_BYTES - 1] = '\0';
}

fa_status ring_finish(ring_run *run, const fa_ring_options *opts, char *why, size_t why_size)
{
    run->st.total_s = ring_now() - run->started;
    if (opts && opts->stats)
        *opts->stats = run->st;
    int own = ring_failed(run) && run->t && run->err.origin == run->t->rank && run->whole[0];
    if (why && why_size > 0)
        snprintf(why, why_size, "%s", own ? run->whole : ring_failed(run) ? run->err.msg : "");
    return (fa_status)run->err.status;
}

/* Waits for one request within the run's timeout; a failure breaks the ring here. */
static void wait_request(ring_run *run, void **req, const char *what)
{
    if (!*req)
        return;
    double t0 = ring_now();
    int rc = run->t->wait(run->t->user, *req, run->timeout_ms);
    run->st.wait_s += ring_now() - t0;
    if (rc == FA_RING_WAIT_DONE) {
        *req = NULL;
        return;
    }
    if (rc == FA_RING_WAIT_TIMEOUT && run->t->cancel)
        run->t->cancel(run->t->user, *req);
    *req = NULL;
    run->broken = 1;
    run->err.status = FA_STATUS_OK; /* a transport failure here outranks what was known */
    ring_fail(run, FA_STATUS_TRANSPORT_ERROR, "%s %s", what,
              rc == FA_RING_WAIT_TIMEOUT ? "timed out (a peer failed or stopped)" : "failed");
}

void ring_xfer_start(ring_run *run, ring_xfer *x, int tag, void *send_buf, size_t send_bytes,
                     void *recv_buf, size_t recv_bytes)
{
    memset(x, 0, sizeof *x);
    if (run->broken)
        return;
    const fa_ring_transport *t = run->t;
    int next = (t->rank + 1) % t->size, prev = (t->rank + t->size - 1) % t->size;
    memcpy(send_buf, &run->err, sizeof run->err);
    x->recv_buf = recv_buf;
    x->started = 1;
    if (t->recv(t->user, prev, tag, recv_buf, recv_bytes, &x->recv_req) != 0) {
        x->recv_req = NULL;
        run->broken = 1;
        ring_fail(run, FA_STATUS_TRANSPORT_ERROR, "receive from rank %d failed to start", prev);
        return;
    }
    if (t->send(t->user, next, tag, send_buf, send_bytes, &x->send_req) != 0) {
        x->send_req = NULL;
        run->broken = 1;
        ring_fail(run, FA_STATUS_TRANSPORT_ERROR, "send to rank %d failed to start", next);
        return;
    }
    run->st.bytes_sent += send_bytes;
}

/* Tests one request without waiting: released when complete; a failure breaks the ring. */
static void poll_request(ring_run *run, void **req, const char *what)
{
    if (!*req || run->broken)
        return;
    int rc = run->t->wait(run->t->user, *req, 0);
    if (rc == FA_RING_WAIT_TIMEOUT)
        return;
    *req = NULL;
    if (rc != FA_RING_WAIT_DONE) {
        run->broken = 1;
        run->err.status = FA_STATUS_OK; /* as in wait_request: a transport failure outranks */
        ring_fail(run, FA_STATUS_TRANSPORT_ERROR, "%s failed", what);
    }
}

void ring_xfer_poll(ring_run *run, ring_xfer *x)
{
    if (!x || !x->started)
        return;
    int pending = x->recv_req != NULL;
    poll_request(run, &x->recv_req, "receive from the previous rank");
    x->received |= pending && !x->recv_req && !run->broken;
    poll_request(run, &x->send_req, "send to the next rank");
}

void ring_xfer_finish(ring_run *run, ring_xfer *x)
{
    if (x->started && !run->broken) {
        run->st.transfers++;
        run->st.transfers_hidden += !x->recv_req && !x->send_req;
    }
    int had_recv = x->recv_req != NULL || x->received;
    wait_request(run, &x->recv_req, "receive from the previous rank");
    if (x->send_req && run->broken && run->t->cancel) {
        run->t->cancel(run->t->user, x->send_req);
        x->send_req = NULL;
    }
    wait_request(run, &x->send_req, "send to the next rank");
    if (had_recv && !run->broken) {
        ring_header h;
        memcpy(&h, x->recv_buf, sizeof h);
        ring_adopt(run, &h);
    }
}

void ring_agree(ring_run *run)
{
    /* wait_s and the transfer counts are the steps', not the agreement's */
    double waited = run->st.wait_s;
    int32_t transfers = run->st.transfers, hidden = run->st.transfers_hidden;
    for (int round = 0; round + 1 < run->t->size && !run->broken; round++) {
        ring_header out, in;
        ring_xfer x;
        ring_xfer_start(run, &x, RING_TAG_AGREE, &out, sizeof out, &in, sizeof in);
        ring_xfer_finish(run, &x);
    }
    run->st.wait_s = waited;
    run->st.transfers = transfers;
    run->st.transfers_hidden = hidden;
}
