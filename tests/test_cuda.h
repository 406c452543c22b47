/*
 * test_cuda.h - the tests of test_cuda_no_driver.c that test_cuda.c's main runs in its "no GPU
 * needed" group (test_cuda.c holds the NVRTC compile tests).
 */
#ifndef FA_TEST_CUDA_H
#define FA_TEST_CUDA_H

#define OK FA_STATUS_OK

void test_no_driver(void **state);
void test_nvrtc_explicit_path(void **state);
void test_interop_null(void **state);
void test_arch_context(void **state);
void test_backward_plan(void **state);
void test_cpu_still_works(void **state);

#endif /* FA_TEST_CUDA_H */
