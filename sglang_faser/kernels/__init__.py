"""Kernel stand-ins used where SGLang's compiled kernels are unavailable (see ``kernels.cpu``)."""
