"""lazyinfer — Python bindings (ctypes) of the lazyinfer inference engine's C API
(include/lazyinfer.h): generation, RAG over the document cache, diffusion decoding.

    from lazyinfer import Engine
    with Engine("synth:tiny-llama") as e:
        print(e.generate("Hello", max_tokens=16, temperature=0))

How liblazyinfer.so is found: lazyinfer._lib (LAZYINFER_LIB, the checkout's build, the copy
installed with the package, else `make lib`). README.md "Python" has the details.
"""
from .engine import (DllmResult, Engine, InvalidArgumentError, LazyInferError, RagResult)

__all__ = ["Engine", "RagResult", "DllmResult", "LazyInferError", "InvalidArgumentError"]
__version__ = "0.1.0"
