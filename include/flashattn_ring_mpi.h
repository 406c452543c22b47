/*
 * flashattn_ring_mpi.h - the MPI transport of flashattn_ring: MPI_Isend / MPI_Irecv on a
 * communicator, waits bounded by polling MPI_Test. Device buffers are staged through the host
 * by the ring, so an MPI library without device-memory support serves every backend.
 */
#ifndef FLASHATTN_RING_MPI_H
#define FLASHATTN_RING_MPI_H

#include <mpi.h>

#include "flashattn_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Fills *out with the transport of `comm` (rank and size from the communicator). MPI must be
 * initialised; the communicator must outlive the transport's use. Returns FA_STATUS_NULL_POINTER
 * or TRANSPORT_ERROR (an MPI call failed: MPI_Comm_rank, MPI_Comm_size).
 */
FA_API fa_status fa_ring_transport_mpi(MPI_Comm comm, fa_ring_transport *out);

/*
 * How the ring moves device buffers over this MPI library, in one line for a context's backend:
 * through host staging (fa_buffer_read, MPI on host memory, fa_buffer_write), and what the
 * library says about device memory: Open MPI's MPIX_Query_cuda_support() when its mpi-ext.h
 * declares it (1: CUDA-aware, still staged, since the public API gives a transport no device
 * pointer; 0: not CUDA-aware), else that the library does not say. MPI must be initialised for
 * the query. Writes at most `size` bytes (always terminated when size > 0).
 */
FA_API void fa_ring_mpi_explain(fa_context *ctx, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_RING_MPI_H */
