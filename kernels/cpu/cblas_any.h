/* The CBLAS interface under the name the BLAS gives it: cblas.h (OpenBLAS, BLIS, Cray LibSci,
   reference CBLAS) or MKL's mkl_cblas.h (CMake finds which; MGT_CBLAS_MKL). */
#pragma once

#ifdef MGT_CBLAS_MKL
#include <mkl_cblas.h>
#else
#include <cblas.h>
#endif
