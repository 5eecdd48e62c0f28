# CUDA is an optional language: enabled when nvcc is found (and TANDEM_CUDA is on). Code that
# needs it checks TANDEM_HAVE_CUDA; the GPU tests skip at run time when no device is present.
set(TANDEM_HAVE_CUDA OFF)
if(TANDEM_CUDA)
    if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
        set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
    endif()
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
        if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
            # SASS for A100 (8.0; also runs on 8.6), L4/L40/RTX 40 (8.9) and H100/H200 (9.0),
            # plus compute_90 PTX that the driver JIT-compiles for newer devices
            set(CMAKE_CUDA_ARCHITECTURES 80-real 89-real 90)
        endif()
        enable_language(CUDA)
        set(CMAKE_CUDA_STANDARD 17)
        set(TANDEM_HAVE_CUDA ON)
        message(STATUS "tandem: CUDA backend enabled (${CMAKE_CUDA_COMPILER_VERSION})")
    else()
        message(STATUS "tandem: nvcc not found, CUDA backend disabled")
    endif()
endif()
