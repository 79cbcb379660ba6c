# Spack recipe for megatron-c: `spack repo add <checkout>/spack`, then `spack install megatron-c`.
# See docs/install.md.

from spack.package import *


class MegatronC(CMakePackage, CudaPackage):
    """Train GPT transformer language models in C with the intra-layer (tensor) model
    parallelism of Megatron-LM and data parallelism over MPI; parallel HDF5 datasets and
    sharded checkpoints; BLAS and OpenMP on CPUs."""

    homepage = "https://github.com/megatron-c/megatron-c"
    # where the project is published; a center can mirror it or `spack develop` a checkout
    git = "https://github.com/megatron-c/megatron-c.git"


    version("main", branch="main")
    version("0.1.0", tag="v0.1.0")

    # CudaPackage adds the +cuda and cuda_arch variants; they map to MGT_CUDA below.
    variant("nccl", default=False, when="+cuda",
            description="NCCL collectives on device buffers (MGT_NCCL)")
    variant("native", default=False,
            description="Optimize for the build machine (MGT_NATIVE, -march=native)")

    depends_on("c", type="build")
    depends_on("cmake@3.20:", type="build")
    depends_on("mpi")
    depends_on("hdf5@1.10.7:+mpi")
    depends_on("blas")
    depends_on("nccl", when="+nccl")
    depends_on("cuda@11.0:", when="+cuda")

    def cmake_args(self):
        spec = self.spec
        blas = spec["blas"]
        args = [
            self.define_from_variant("MGT_CUDA", "cuda"),
            self.define_from_variant("MGT_NCCL", "nccl"),
            self.define_from_variant("MGT_NATIVE", "native"),
            self.define("MGT_BUILD_BENCH", False),
            self.define("BLAS_LIBRARIES", blas.libs.joined(";")),
            self.define("MGT_CBLAS_INCLUDE_DIR", blas.headers.directories[0]),
            self.define("HDF5_PREFER_PARALLEL", True),
            self.define("MPIEXEC_EXECUTABLE", join_path(spec["mpi"].prefix.bin, "mpiexec")),
        ]
        if spec.satisfies("+cuda"):
            archs = spec.variants["cuda_arch"].value
            if archs and archs[0] != "none":
                args.append(self.define("CMAKE_CUDA_ARCHITECTURES", ";".join(archs)))
        return args

    def check(self):
        # the unit tests; the MPI, training and Slurm ones need a job allocation
        with working_dir(self.build_directory):
            ctest("--output-on-failure", "-L", "unit")
