#!/usr/bin/env python3
"""Checks the Spack recipe without Spack.

1. Every declared version can be fetched: its branch, tag or commit is in a mirror of the
   repository (a bare clone of this checkout, as a center's mirror holds it), and a numbered
   release's commit builds that version (CMakeLists.txt's project version).
2. The recipe is loaded with a stand-in for Spack's package DSL and its CMake arguments are
   computed for CPU (with and without oneDNN), +cuda and +cuda+nccl specs whose CUDA is not
   /usr/local/cuda: the spec's
   nvcc and toolkit are passed, NCCL options only with +cuda, no empty argument, tests built
   only when testing, every MGT_ option one CMakeLists.txt defines; nvcc's C++ host compiler
   is a dependency under +cuda; the stand-alone tests exist.
Usage: spack_check.py SOURCE_DIR"""
import os
import py_compile
import re
import subprocess
import sys
import tempfile
import types

src = os.path.abspath(sys.argv[1])
recipe = src + "/spack/packages/megatron-c/package.py"
py_compile.compile(recipe, doraise=True)
cmake_text = open(src + "/CMakeLists.txt").read() + open(src + "/tests/CMakeLists.txt").read()
errors = []
notes = []


def fail(msg):
    errors.append(msg)


# ---- a stand-in for spack.package: directives are recorded, CMake defines formatted as Spack's
directives = []


def directive(kind):
    def record(*args, **kwargs):
        directives.append((kind, args, kwargs))

    return record


class Prefix(str):
    def __getattr__(self, name):
        return Prefix(os.path.join(self, name))


class Dep:
    def __init__(self, name, prefix):
        self.name, self.prefix = name, Prefix(prefix)
        self.libs = types.SimpleNamespace(joined=lambda sep=" ": sep.join(
            [os.path.join(prefix, "lib", "lib%s.so" % name)]))
        self.headers = types.SimpleNamespace(directories=[os.path.join(prefix, "include")])


class Variant:
    def __init__(self, value):
        self.value = value


class Spec:
    def __init__(self, variants, deps):
        self.variants, self.deps = variants, deps

    def satisfies(self, s):
        for m in re.finditer(r"([+~])(\w+)", s):
            on = self.variants.get(m.group(2), Variant(False)).value is True
            if on != (m.group(1) == "+"):
                return False
        return True

    def __getitem__(self, name):
        return self.deps[name]


def cmake_value(v):
    if isinstance(v, bool):
        return "BOOL", "ON" if v else "OFF"
    if isinstance(v, (list, tuple)):
        return "STRING", ";".join(map(str, v))
    return "STRING", str(v)


class CMakePackage:
    run_tests = False

    def define(self, name, value):
        kind, text = cmake_value(value)
        return "-D%s:%s=%s" % (name, kind, text)

    def define_from_variant(self, name, variant):
        if variant not in self.spec.variants:  # as Spack: a variant inactive in this spec
            return ""
        return self.define(name, self.spec.variants[variant].value)


class CudaPackage:
    pass


dsl = types.ModuleType("spack.package")
for kind in ("version", "variant", "depends_on", "conflicts", "requires", "maintainers",
             "license", "patch", "provides", "resource"):
    setattr(dsl, kind, directive(kind))
dsl.CMakePackage, dsl.CudaPackage = CMakePackage, CudaPackage
dsl.join_path = os.path.join
dsl.which = lambda *a, **k: None
dsl.working_dir = dsl.ctest = dsl.run_after = dsl.run_before = lambda *a, **k: None
dsl.__all__ = [n for n in vars(dsl) if not n.startswith("_")]
spack_pkg = types.ModuleType("spack")
spack_pkg.package = dsl
sys.modules["spack"], sys.modules["spack.package"] = spack_pkg, dsl
module = types.ModuleType("megatron_c_recipe")
exec(compile(open(recipe).read(), recipe, "exec"), module.__dict__)
cls = module.MegatronC

# ---- 1. versions that exist
versions = [(a[0], k) for kind, a, k in directives if kind == "version"]
if not versions:
    fail("the recipe declares no version")
mirror = None
if not os.path.isdir(os.path.join(src, ".git")):
    notes.append("not a git checkout: versions checked by form only")
else:
    tmp = tempfile.mkdtemp()
    mirror = os.path.join(tmp, "megatron-c.git")
    subprocess.run(["git", "clone", "--quiet", "--mirror", src, mirror], check=True)
    shallow = subprocess.run(["git", "-C", src, "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True).stdout.strip() == "true"


def git(*args):
    return subprocess.run(["git", "--git-dir", mirror] + list(args), capture_output=True, text=True)


for name, kw in versions:
    how = [k for k in ("branch", "tag", "commit") if k in kw]
    if len(how) != 1:
        fail("version %s: give exactly one of branch, tag, commit (it has %s)" % (name, how))
        continue
    how, ref = how[0], kw[how[0]]
    if how == "commit" and not re.fullmatch(r"[0-9a-f]{40}", ref):
        fail("version %s: commit %r is not a full 40-digit hash" % (name, ref))
        continue
    if mirror is None:
        continue
    want = {"branch": "refs/heads/", "tag": "refs/tags/"}.get(how, "") + ref
    found = git("rev-parse", "--verify", "--quiet", want + "^{commit}").returncode == 0
    if not found and how == "commit" and shallow:
        notes.append("version %s: commit %s not in this shallow clone, not checked" % (name, ref[:12]))
        continue
    if not found:
        fail("version %s: %s %s cannot be fetched: the repository has no such %s"
             % (name, how, ref, how))
        continue
    if re.fullmatch(r"[0-9.]+", name):
        at = git("show", want + ":CMakeLists.txt").stdout
        m = re.search(r"project\(megatron-c VERSION ([0-9.]+)", at)
        if not m or m.group(1) != name:
            fail("version %s: %s %s builds version %s" % (name, how, ref, m and m.group(1)))
    print("ok: version %s (%s %s) is in the mirror" % (name, how, ref[:12]))

# ---- 2. CMake arguments for CPU and CUDA specs whose toolkit is not /usr/local/cuda
options = set(re.findall(r"option\((MGT_\w+)", cmake_text))
options |= set(re.findall(r"set\((MGT_\w+) [^)]*CACHE", cmake_text))
options |= set(re.findall(r"find_(?:path|library|program)\((MGT_\w+)", cmake_text))
cuda_prefix = "/opt/spack/linux-x86_64/cuda-12.6.3-abcdef"
deps = {"blas": Dep("openblas", "/opt/spack/openblas"), "mpi": Dep("openmpi", "/opt/spack/ompi"),
        "cuda": Dep("cuda", cuda_prefix), "nccl": Dep("nccl", "/opt/spack/nccl"),
        "hdf5": Dep("hdf5", "/opt/spack/hdf5")}
cases = [("cpu", {"cuda": Variant(False), "native": Variant(False), "onednn": Variant(True)}, False),
         ("cpu~onednn", {"cuda": Variant(False), "native": Variant(False),
                         "onednn": Variant(False)}, False),
         ("cuda", {"cuda": Variant(True), "cuda_arch": Variant(("90",)), "nccl": Variant(False),
                   "native": Variant(False), "onednn": Variant(True)}, True),
         ("cuda+nccl", {"cuda": Variant(True), "cuda_arch": Variant(("80", "90")),
                        "nccl": Variant(True), "native": Variant(False),
                        "onednn": Variant(True)}, False)]
for label, variants, testing in cases:
    pkg = cls.__new__(cls)
    pkg.spec, pkg.run_tests = Spec(variants, deps), testing
    args = pkg.cmake_args()
    defs = dict(re.match(r"-D(\w+):\w+=(.*)", a).groups() for a in args if a)
    if "" in args:
        fail("%s: an empty CMake argument (a variant this spec lacks)" % label)
    for name in defs:
        if name.startswith("MGT_") and name not in options:
            fail("%s: the recipe sets %s, which CMakeLists.txt does not define" % (label, name))
    if defs.get("MGT_ONEDNN") != ("ON" if variants["onednn"].value else "OFF"):
        fail("%s: MGT_ONEDNN is %s" % (label, defs.get("MGT_ONEDNN")))
    cuda = variants["cuda"].value
    if defs.get("MGT_CUDA") != ("ON" if cuda else "OFF"):
        fail("%s: MGT_CUDA is %s" % (label, defs.get("MGT_CUDA")))
    if defs.get("MGT_BUILD_TESTS") != ("ON" if testing else "OFF"):
        fail("%s: MGT_BUILD_TESTS is %s with run_tests %s" % (label, defs.get("MGT_BUILD_TESTS"), testing))
    if cuda:
        if defs.get("CMAKE_CUDA_COMPILER") != cuda_prefix + "/bin/nvcc":
            fail("%s: CMAKE_CUDA_COMPILER is %s, not the spec's %s/bin/nvcc"
                 % (label, defs.get("CMAKE_CUDA_COMPILER"), cuda_prefix))
        if defs.get("CUDAToolkit_ROOT") != cuda_prefix:
            fail("%s: CUDAToolkit_ROOT is %s, not the spec's cuda" % (label, defs.get("CUDAToolkit_ROOT")))
        if defs.get("MGT_NCCL") != ("ON" if variants["nccl"].value else "OFF"):
            fail("%s: MGT_NCCL is %s" % (label, defs.get("MGT_NCCL")))
        if defs.get("CMAKE_CUDA_ARCHITECTURES") != ";".join(variants["cuda_arch"].value):
            fail("%s: CMAKE_CUDA_ARCHITECTURES is %s" % (label, defs.get("CMAKE_CUDA_ARCHITECTURES")))
    elif any(n in defs for n in ("MGT_NCCL", "CMAKE_CUDA_COMPILER", "CUDAToolkit_ROOT")):
        fail("%s: CUDA or NCCL options without +cuda" % label)
    print("ok: %s: %d CMake arguments" % (label, len(args)))

# ---- dependencies and stand-alone tests
deps_declared = [(a[0], k.get("when"), k.get("type")) for kind, a, k in directives if kind == "depends_on"]


def depends(prefix, under=None):
    return any(d.split("@")[0].split("+")[0].split()[0] == prefix and
               (w is None or (under is not None and under in w)) for d, w, _ in deps_declared)


for dep in ("c", "cmake", "mpi", "blas", "pcre2", "utf8proc"):
    if not depends(dep):
        fail("missing depends_on(%r)" % dep)
if not any(d.startswith("hdf5") and "+mpi" in d for d, w, _ in deps_declared):
    fail("missing depends_on('hdf5...+mpi')")
if not depends("cxx", "+cuda"):
    fail("+cuda: nvcc needs a C++ host compiler, and the recipe does not depend on cxx")
if not depends("cuda", "+cuda"):
    fail("+cuda does not depend on cuda")
tests = [n for n in vars(cls) if n.startswith("test_") and callable(getattr(cls, n))]
if not tests:
    fail("no stand-alone test (a test_* method) for `spack test run`")
for e in errors:
    print("FAIL:", e)
for n in notes:
    print("note:", n)
print("spack recipe: %d versions, %d specs, stand-alone tests %s; %d problems"
      % (len(versions), len(cases), tests, len(errors)))
sys.exit(1 if errors else 0)
