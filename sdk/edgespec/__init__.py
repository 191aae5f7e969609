"""edgespec: put a fast, verified language model on a phone.

Importing the package is cheap: torch, torchao and ExecuTorch are imported only by
the modules that need them (`edgespec.models`, `edgespec.export`, `edgespec.runtime`).
"""

from edgespec.errors import EdgespecError
from edgespec.host import passive_openmp

passive_openmp()  # before torch loads OpenMP: its workers sleep instead of spinning beside the kernels' threads

__version__ = "0.1.0"
__all__ = ["EdgespecError", "__version__"]
