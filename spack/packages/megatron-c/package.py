# Spack recipe for megatron-c: `spack repo add <checkout>/spack`, then `spack install megatron-c`.
# See docs/install.md; tests/spack_check.py checks it (versions fetchable, CMake arguments).

import json
import os

from spack.package import *


class MegatronC(CMakePackage, CudaPackage):
    """Train GPT transformer language models in C with the intra-layer (tensor) model
    parallelism of Megatron-LM and data parallelism over MPI; parallel HDF5 datasets and
    sharded checkpoints; BLAS and OpenMP on CPUs."""

    homepage = "https://github.com/megatron-c/megatron-c"
    # where the project is published; a center can mirror it or `spack develop` a checkout
    git = "https://github.com/megatron-c/megatron-c.git"

    maintainers("megatron-c")

    # Releases are pinned by commit: a tag can be moved or never pushed, a commit cannot.
    version("main", branch="main")
    version("0.1.0", commit="2aa9122b5abfde7d8b54f37d1f86cb930cbadcc1")

    # CudaPackage adds the +cuda and cuda_arch variants; they map to MGT_CUDA below.
    variant("nccl", default=False, when="+cuda",
            description="NCCL collectives on device buffers (MGT_NCCL)")
    variant("native", default=False,
            description="Optimize for the build machine (MGT_NATIVE, -march=native)")
    # 0.1.0 predates native bf16 GEMMs: the variant would build nothing there
    variant("onednn", default=True, when="@main,0.2.0:",
            description="--bf16 GEMMs on the CPU's bf16 units (AVX512-BF16, AMX) through oneDNN "
            "(MGT_ONEDNN); without it they are emulated in fp32")

    depends_on("c", type="build")
    depends_on("cxx", type="build", when="+cuda")  # nvcc's host compiler
    depends_on("cmake@3.20:", type="build")
    depends_on("mpi")
    # 1.10.7 is the first with per-file locking control; 1.12.0 lacks it again
    depends_on("hdf5@1.10.7:1.10,1.12.1:+mpi")
    depends_on("blas")
    depends_on("pcre2")  # Hugging Face tokenizers: the pre-tokenizers' regexes
    depends_on("utf8proc")  # and their NFC normalizer
    # one OpenMP runtime in the process: OpenBLAS's threads are the kernels' threads
    depends_on("openblas threads=openmp", when="^[virtuals=blas] openblas")
    depends_on("blis+cblas", when="^[virtuals=blas] blis")
    # its OpenMP build: one threading runtime in the process, as for OpenBLAS
    depends_on("onednn cpu_runtime=omp", when="+onednn")
    depends_on("libmicrohttpd", when="@main,0.2.0:")  # mgt serve's HTTP server
    depends_on("nccl", when="+nccl")
    depends_on("cuda@11.0:", when="+cuda")
    depends_on("python@3:", type="test")  # the recipe's own check among the unit tests

    def cmake_args(self):
        spec = self.spec
        blas = spec["blas"]
        args = [
            self.define_from_variant("MGT_CUDA", "cuda"),
            self.define_from_variant("MGT_NATIVE", "native"),
            self.define("MGT_BUILD_TESTS", self.run_tests),
            self.define("MGT_BUILD_BENCH", False),
            self.define("BLAS_LIBRARIES", blas.libs.joined(";")),
            self.define("MGT_CBLAS_INCLUDE_DIR", blas.headers.directories[0]),
            self.define("HDF5_PREFER_PARALLEL", True),
            self.define("MPIEXEC_EXECUTABLE", join_path(spec["mpi"].prefix.bin, "mpiexec")),
        ]
        if "onednn" in spec.variants:
            args.append(self.define_from_variant("MGT_ONEDNN", "onednn"))
        if spec.satisfies("@main,0.2.0:"):
            args.append(self.define("MGT_MHD", "ON"))  # mgt serve, never left out silently
        if spec.satisfies("+cuda"):
            # the spec's toolkit, never whatever nvcc /usr/local/cuda or PATH has
            cuda = spec["cuda"].prefix
            args += [
                self.define_from_variant("MGT_NCCL", "nccl"),
                self.define("CMAKE_CUDA_COMPILER", join_path(cuda.bin, "nvcc")),
                self.define("CUDAToolkit_ROOT", cuda),
            ]
            if spec.satisfies("+nccl"):
                args.append(self.define("NCCL_HOME", spec["nccl"].prefix))
            archs = spec.variants["cuda_arch"].value
            if archs and archs[0] != "none":
                args.append(self.define("CMAKE_CUDA_ARCHITECTURES", ";".join(archs)))
        return args

    def check(self):
        # the unit tests; the MPI, training and Slurm ones need a job allocation
        with working_dir(self.build_directory):
            ctest("--output-on-failure", "-L", "unit")

    def test_train(self):
        """trains a small GPT on 2 ranks (tensor parallel) for 40 iterations: the loss falls"""
        mpiexec = which(join_path(self.spec["mpi"].prefix.bin, "mpiexec"), required=True)
        mgt = self.prefix.bin.mgt
        # one OpenMP thread a rank; root (in a container) must be allowed by Open MPI
        root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        with set_env(OMP_NUM_THREADS="1", **(root if os.geteuid() == 0 else {})):
            mpiexec("-n", "2", mgt, "train", "--mock-data", "--tensor-model-parallel-size", "2",
                    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                    "--seq-length", "32", "--micro-batch-size", "4", "--global-batch-size", "8",
                    "--train-iters", "40", "--lr", "3e-3", "--log-interval", "1",
                    "--metrics-file", "metrics.jsonl")
        losses = [r["loss"] for r in map(json.loads, open("metrics.jsonl")) if "loss" in r]
        assert len(losses) == 40, "expected 40 losses, got %d" % len(losses)
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        assert last < 0.8 * first, "the loss did not fall: %.3f to %.3f" % (first, last)

    def test_train_bf16(self):
        """--bf16 on the CPU: native GEMMs with +onednn where the CPU has bf16 units, else
        emulated with the reason; the loss falls either way"""
        mgt = self.prefix.bin.mgt
        with set_env(OMP_NUM_THREADS="1"):
            out = which(mgt, required=True)(
                "train", "--mock-data", "--bf16", "--num-layers", "2", "--hidden-size", "64",
                "--num-attention-heads", "2", "--seq-length", "32", "--micro-batch-size", "8",
                "--train-iters", "40", "--lr", "3e-3", "--log-interval", "1", "--eval-iters", "0",
                "--use-flash-attn", "--metrics-file", "bf16.jsonl", output=str, error=str)
        if self.spec.satisfies("+onednn"):
            assert "bf16 GEMMs on oneDNN" in out or "no bf16 units on this CPU" in out, out
        elif "onednn" in self.spec.variants:  # 0.1.0 says nothing of it
            assert "bf16 GEMMs emulated in fp32: built without oneDNN" in out, out
        losses = [r["loss"] for r in map(json.loads, open("bf16.jsonl")) if "loss" in r]
        assert len(losses) == 40 and sum(losses[-5:]) < 0.8 * sum(losses[:5]), losses

    def test_version(self):
        """mgt version names the project, the backends built and the CPU's bf16 GEMMs"""
        out = which(self.prefix.bin.mgt, required=True)("version", output=str, error=str)
        assert out.startswith("megatron-c "), out
        if self.spec.satisfies("+cuda"):
            assert "cuda" in out, out
        if self.spec.satisfies("+onednn"):
            assert "oneDNN" in out, out
        elif "onednn" in self.spec.variants:
            assert "built without oneDNN" in out, out
