/*
 * fake_transport.c - the in-process mailbox behind the fake ring's callback transport (see
 * fake_transport.h): a mutex, a condition variable and a list of messages.
 */
#define _POSIX_C_SOURCE 200809L
#include "fake_transport.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct fake_msg {
    int from, to, tag;
    size_t bytes;
    unsigned char *data;
    struct fake_msg *next;
} fake_msg;

typedef struct fake_rank {
    fake_world *w;
    int rank;
} fake_rank;

struct fake_world {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    fake_msg *head, *tail;
    int size, silent;
    fake_rank ranks[16];
    int sends[16];                  /* sends made by each rank */
    int inject_rank, inject_nth;    /* the send that carries the injected head; -1: none */
    unsigned char inject_head[512];
    size_t inject_bytes;
};

/* A pending operation: sends complete at once (the data is copied), receives on a match. */
typedef struct fake_req {
    int is_send, peer, tag;
    void *data;
    size_t bytes;
} fake_req;

fake_world *fake_world_create(int size, int silent)
{
    if (size < 1 || size > 16)
        return NULL;
    fake_world *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->size = size;
    w->silent = silent;
    w->inject_rank = -1;
    for (int r = 0; r < size; r++) {
        w->ranks[r].w = w;
        w->ranks[r].rank = r;
    }
    return w;
}

void fake_world_inject(fake_world *w, int rank, int nth, const void *head, size_t bytes)
{
    w->inject_rank = rank;
    w->inject_nth = nth;
    w->inject_bytes = bytes < sizeof w->inject_head ? bytes : sizeof w->inject_head;
    memcpy(w->inject_head, head, w->inject_bytes);
}

void fake_world_destroy(fake_world *w)
{
    if (!w)
        return;
    for (fake_msg *m = w->head, *next; m; m = next) {
        next = m->next;
        free(m->data);
        free(m);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

static int fake_send(void *user, int peer, int tag, const void *data, size_t bytes, void **req)
{
    fake_rank *me = user;
    fake_world *w = me->w;
    fake_req *r = calloc(1, sizeof *r);
    if (!r)
        return 1;
    r->is_send = 1;
    *req = r;
    if (me->rank == w->silent)
        return 0;
    fake_msg *m = calloc(1, sizeof *m);
    if (!m || !(m->data = malloc(bytes ? bytes : 1))) {
        free(m);
        free(r);
        return 1;
    }
    memcpy(m->data, data, bytes);
    pthread_mutex_lock(&w->mu);
    int nth = w->sends[me->rank]++;
    pthread_mutex_unlock(&w->mu);
    if (me->rank == w->inject_rank && nth == w->inject_nth && bytes >= w->inject_bytes)
        memcpy(m->data, w->inject_head, w->inject_bytes);
    m->from = me->rank;
    m->to = peer;
    m->tag = tag;
    m->bytes = bytes;
    pthread_mutex_lock(&w->mu);
    if (w->tail)
        w->tail->next = m;
    else
        w->head = m;
    w->tail = m;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static int fake_recv(void *user, int peer, int tag, void *data, size_t bytes, void **req)
{
    (void)user;
    fake_req *r = calloc(1, sizeof *r);
    if (!r)
        return 1;
    r->peer = peer;
    r->tag = tag;
    r->data = data;
    r->bytes = bytes;
    *req = r;
    return 0;
}

/* Takes the first message for (me, r) off the list; 1 when found, -1 on a size mismatch. */
static int take(fake_world *w, int me, fake_req *r)
{
    for (fake_msg **p = &w->head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
        fake_msg *m = *p;
        if (m->to != me || m->from != r->peer || m->tag != r->tag)
            continue;
        *p = m->next;
        if (w->tail == m)
            w->tail = prev;
        int ok = m->bytes == r->bytes;
        if (ok)
            memcpy(r->data, m->data, m->bytes);
        free(m->data);
        free(m);
        return ok ? 1 : -1;
    }
    return 0;
}

static int fake_wait(void *user, void *req, int timeout_ms)
{
    fake_rank *me = user;
    fake_world *w = me->w;
    fake_req *r = req;
    if (r->is_send) {
        free(r);
        return FA_RING_WAIT_DONE;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->mu);
    int found = 0, timed_out = 0;
    while (!(found = take(w, me->rank, r)) && !timed_out)
        timed_out = pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0;
    pthread_mutex_unlock(&w->mu);
    if (!found)
        return FA_RING_WAIT_TIMEOUT;
    free(r);
    return found == 1 ? FA_RING_WAIT_DONE : FA_RING_WAIT_FAILED;
}

static void fake_cancel(void *user, void *req)
{
    (void)user;
    free(req);
}

fa_ring_transport fake_transport(fake_world *w, int rank)
{
    fa_ring_transport t;
    t.rank = rank;
    t.size = w->size;
    t.user = &w->ranks[rank];
    t.send = fake_send;
    t.recv = fake_recv;
    t.wait = fake_wait;
    t.cancel = fake_cancel;
    return t;
}
