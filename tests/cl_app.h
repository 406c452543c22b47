/*
 * cl_app.h - the caller's side of the OpenCL interop tests: what an application that already
 * uses OpenCL holds (a device, its cl_context and a queue), made from OpenCL device 0 of the
 * library's flattened list, the first platform that has a device. Include after <cmocka.h> and
 * <CL/cl.h>; shared by test_opencl.c and test_opencl_overlap.c.
 */
#ifndef FA_TEST_CL_APP_H
#define FA_TEST_CL_APP_H

typedef struct app {
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
} app;

static void app_open(app *a)
{
    cl_platform_id platforms[16];
    cl_uint np = 0;
    assert_int_equal(clGetPlatformIDs(16, platforms, &np), CL_SUCCESS);
    a->device = NULL;
    for (cl_uint i = 0; i < np && i < 16 && !a->device; i++) {
        if (clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_ALL, 1, &a->device, NULL) != CL_SUCCESS)
            a->device = NULL;
    }
    assert_non_null(a->device);
    cl_int err = CL_SUCCESS;
    a->context = clCreateContext(NULL, 1, &a->device, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    a->queue = clCreateCommandQueue(a->context, a->device, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
}

static void app_close(app *a)
{
    clReleaseCommandQueue(a->queue);
    clReleaseContext(a->context);
}

#endif /* FA_TEST_CL_APP_H */
