#!/usr/bin/env python3
"""Checks what can be checked of the Spack recipe without Spack: it compiles, its variants
match the CMake options, and its version is the project's.
Usage: spack_check.py SOURCE_DIR"""
import py_compile
import re
import sys

src = sys.argv[1]
recipe = src + "/spack/packages/megatron-c/package.py"
py_compile.compile(recipe, doraise=True)
text = open(recipe).read()
cmake = open(src + "/CMakeLists.txt").read()

options = set(re.findall(r"option\((MGT_\w+)", cmake))
mapped = dict(re.findall(r'define_from_variant\("(MGT_\w+)",\s*"(\w+)"\)', text))
variants = set(re.findall(r'variant\(\s*"(\w+)"', text)) | {"cuda"}  # cuda from CudaPackage
errors = []
for opt, var in mapped.items():
    if opt not in options:
        errors.append("the recipe sets %s, which CMakeLists.txt does not define" % opt)
    if var not in variants:
        errors.append("the recipe maps %s to an undeclared variant %s" % (opt, var))
for need in ("MGT_CUDA", "MGT_NCCL"):
    if need not in mapped:
        errors.append("no variant sets %s" % need)
version = re.search(r"project\(megatron-c VERSION ([0-9.]+)", cmake).group(1)
if 'version("%s"' % version not in text:
    errors.append("the recipe has no version %s (the project's)" % version)
for dep in ('"mpi"', '"hdf5', '"blas"', '"cmake'):
    if "depends_on(" + dep not in text:
        errors.append("missing depends_on(%s...)" % dep)
for e in errors:
    print("FAIL:", e)
print("spack recipe: compiles; variants %s map to %s; version %s; %d problems"
      % (sorted(mapped.values()), sorted(mapped), version, len(errors)))
sys.exit(1 if errors else 0)
