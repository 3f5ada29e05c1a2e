"""agn-conformance: conformance harness for AI Grid Network routing and the Praxis AI data plane."""

__version__ = "0.1.0"
