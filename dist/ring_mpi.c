/*
 * ring_mpi.c - the MPI transport: each request is a heap-held MPI_Request; a wait polls
 * MPI_Test (which also drives MPI's progress) with short sleeps until it completes or the
 * timeout passes, so a peer that stopped never hangs this rank.
 */
#define _POSIX_C_SOURCE 200809L
#include "flashattn_ring_mpi.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Open MPI's extensions: MPIX_CUDA_AWARE_SUPPORT and MPIX_Query_cuda_support (mpiext_cuda). */
#if defined(OPEN_MPI) && OPEN_MPI && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

/* The communicator travels in `user` as its Fortran handle (an integer in every MPI). */
static MPI_Comm comm_of(void *user)
{
    return MPI_Comm_f2c((MPI_Fint)(intptr_t)user);
}

static int start(void *user, int peer, int tag, void *data, size_t bytes, void **request,
                 int is_send)
{
    if (bytes > (size_t)INT32_MAX)
        return 1; /* one message holds at most INT_MAX bytes */
    MPI_Request *r = malloc(sizeof *r);
    if (!r)
        return 1;
    int rc = is_send ? MPI_Isend(data, (int)bytes, MPI_BYTE, peer, tag, comm_of(user), r)
                     : MPI_Irecv(data, (int)bytes, MPI_BYTE, peer, tag, comm_of(user), r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return 1;
    }
    *request = r;
    return 0;
}

static int mpi_send(void *user, int peer, int tag, const void *data, size_t bytes,
                    void **request)
{
    return start(user, peer, tag, (void *)data, bytes, request, 1);
}

static int mpi_recv(void *user, int peer, int tag, void *data, size_t bytes, void **request)
{
    return start(user, peer, tag, data, bytes, request, 0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int mpi_wait(void *user, void *request, int timeout_ms)
{
    (void)user;
    MPI_Request *r = request;
    double deadline = now_s() + timeout_ms * 1e-3;
    struct timespec nap = {0, 20000}; /* 20 us: a short nap keeps a busy core for the peer */
    for (;;) {
        int done = 0;
        if (MPI_Test(r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            free(r);
            return FA_RING_WAIT_FAILED;
        }
        if (done) {
            free(r);
            return FA_RING_WAIT_DONE;
        }
        if (now_s() > deadline)
            return FA_RING_WAIT_TIMEOUT;
        nanosleep(&nap, NULL);
    }
}

static void mpi_cancel(void *user, void *request)
{
    (void)user;
    MPI_Request *r = request;
    MPI_Cancel(r);
    MPI_Request_free(r);
    free(r);
}

fa_status fa_ring_transport_mpi(MPI_Comm comm, fa_ring_transport *out)
{
    if (!out)
        return FA_STATUS_NULL_POINTER;
    int rank = 0, size = 0;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS)
        return FA_STATUS_TRANSPORT_ERROR;
    out->rank = rank;
    out->size = size;
    out->send = mpi_send;
    out->recv = mpi_recv;
    out->wait = mpi_wait;
    out->cancel = mpi_cancel;
    out->user = (void *)(intptr_t)MPI_Comm_c2f(comm);
    return FA_STATUS_OK;
}

/* What the MPI library says about device (CUDA) memory. */
static const char *mpi_device_memory(void)
{
#if defined(MPIX_CUDA_AWARE_SUPPORT)
    return MPIX_Query_cuda_support() ? "CUDA-aware (MPIX_Query_cuda_support() = 1), not used: "
                                       "the public API gives a transport no device pointer"
                                     : "not CUDA-aware (MPIX_Query_cuda_support() = 0)";
#else
    return "not reported (this MPI's headers have no MPIX_Query_cuda_support)";
#endif
}

void fa_ring_mpi_explain(fa_context *ctx, char *buf, size_t size)
{
    if (!buf || size == 0)
        return;
    fa_backend b = ctx ? fa_context_backend(ctx) : FA_BACKEND_AUTO;
    const char *name = fa_backend_name(b) ? fa_backend_name(b) : "?";
    snprintf(buf, size, "ring transfers: %s buffers through host staging (fa_buffer_read, MPI on "
             "host memory, fa_buffer_write); MPI device memory: %s", name, mpi_device_memory());
}
