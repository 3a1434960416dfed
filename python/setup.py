"""setup.py — bundles liblazyinfer.so into the package at install (`pip install ./python`).

The library comes from LAZYINFER_LIB, else the repository's build (../build/release/), else
`make lib` is run in the repository (which needs the build's Debian packages: `make setup`).
A CUDA build (../build/release-cuda/liblazyinfer.so, `make CUDA=1`) is bundled beside it as
liblazyinfer-cuda.so when present. Everything else is in pyproject.toml.
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def find_library() -> Path:
    env = os.environ.get("LAZYINFER_LIB")
    if env:
        if not Path(env).is_file():
            raise SystemExit(f"lazyinfer: LAZYINFER_LIB={env} is not a file")
        return Path(env)
    built = ROOT / "build" / "release" / "liblazyinfer.so"
    if (ROOT / "Makefile").is_file():
        # make is quick when the library is up to date and rebuilds it when it is not
        r = subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", "lib"])
        if r.returncode != 0 or not built.is_file():
            raise SystemExit("lazyinfer: `make lib` failed in " + str(ROOT) +
                             " (run `make setup` there first, or set LAZYINFER_LIB)")
        return built
    raise SystemExit("lazyinfer: no liblazyinfer.so: set LAZYINFER_LIB, or install from a "
                     "checkout of the repository (pip install ./python)")


class BuildPyWithLib(build_py):
    def run(self) -> None:
        super().run()
        dst = Path(self.build_lib) / "lazyinfer"
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copy2(find_library(), dst / "liblazyinfer.so")
        cuda = ROOT / "build" / "release-cuda" / "liblazyinfer.so"
        if cuda.is_file() and not os.environ.get("LAZYINFER_LIB"):
            shutil.copy2(cuda, dst / "liblazyinfer-cuda.so")


setup(cmdclass={"build_py": BuildPyWithLib})
