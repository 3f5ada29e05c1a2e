"""Where grid components run: the backend protocol and its capabilities (`base`), processes on this machine
(`local`), Kubernetes clusters (`kube`), and the registry the grid factory picks a backend from."""

from harness.backends.base import (
    BACKEND_NAMES,
    CAPABILITIES,
    CRASH,
    OPERATOR_IN_CLUSTER,
    PARTITION,
    Backend,
    OperationUnsupported,
)

__all__ = ["BACKEND_NAMES", "CAPABILITIES", "CRASH", "OPERATOR_IN_CLUSTER", "PARTITION", "Backend",
           "OperationUnsupported"]
