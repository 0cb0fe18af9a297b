"""Import just the parts of google-cloud-compute that tpuctl calls.

``google.cloud.compute_v1``'s package ``__init__`` imports every one of its ~100 service clients,
about a second on a 2-core machine, on every gcp command; tpuctl uses seven. The package is
entered here as a module whose ``__init__`` has not run yet, so importing
``google.cloud.compute_v1.services.instances`` loads only that client and the shared types.
The first access to a name the package would have defined (``compute_v1.Instance``, from any
code in the process) runs the real ``__init__`` into the same module object, so nothing else
ever sees a difference.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

PACKAGE = "google.cloud.compute_v1"
_lock = threading.RLock()


def _complete(module: types.ModuleType, spec: Any) -> None:
    with _lock:
        if module.__dict__.get("_tpuctl_complete"):
            return
        module.__dict__["_tpuctl_complete"] = True
        module.__dict__.pop("__getattr__", None)
        spec.loader.exec_module(module)


def _enter_package() -> None:
    if PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.loader is None:  # pragma: no cover - the library is a base dependency
        importlib.import_module(PACKAGE)
        return
    module = types.ModuleType(PACKAGE)
    module.__spec__ = spec
    module.__path__ = list(spec.submodule_search_locations or [])
    module.__package__ = PACKAGE
    module.__file__ = spec.origin

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if importlib.util.find_spec(f"{PACKAGE}.{name}") is not None:
            # ``from google.cloud.compute_v1 import gapic_version``: a submodule, not a reason to
            # load the whole package
            return importlib.import_module(f"{PACKAGE}.{name}")
        _complete(module, spec)
        return module.__dict__[name] if name in module.__dict__ else getattr(module, name)

    module.__getattr__ = __getattr__  # PEP 562
    sys.modules[PACKAGE] = module


def compute_client(service: str) -> type:
    """The client class of one Compute service, e.g. ``compute_client("instances")``."""
    _enter_package()
    mod = importlib.import_module(f"{PACKAGE}.services.{service}")
    name = "".join(part.capitalize() for part in service.split("_")) + "Client"
    return getattr(mod, name)


def compute_types() -> Any:
    """The message types (Instance, Metadata, requests ...)."""
    _enter_package()
    return importlib.import_module(f"{PACKAGE}.types.compute")
