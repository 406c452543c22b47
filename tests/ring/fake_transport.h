/*
 * fake_transport.h - the callback transport of a single-process fake ring: P ranks are threads
 * that exchange messages through one mailbox (copied on send, matched by sender, receiver and
 * tag in order). A rank can be made silent (its sends vanish) to test the bounded waits.
 */
#ifndef FA_TEST_FAKE_TRANSPORT_H
#define FA_TEST_FAKE_TRANSPORT_H

#include "flashattn_ring.h"

#include <stddef.h>

typedef struct fake_world fake_world;

/* A world of `size` ranks; a rank equal to `silent` (or -1: none) never delivers a message. */
fake_world *fake_world_create(int size, int silent);
void fake_world_destroy(fake_world *w);
/* Makes send number `nth` (counted from 0) of `rank` start with `bytes` of `head` instead of
 * what the rank sent: a failure report injected in the middle of the ring. */
void fake_world_inject(fake_world *w, int rank, int nth, const void *head, size_t bytes);
/* The transport of `rank` in the world (its user pointer lives in the world). */
fa_ring_transport fake_transport(fake_world *w, int rank);

#endif /* FA_TEST_FAKE_TRANSPORT_H */
